"""``strom log-dirs``: each broker's log directories and the partitions in them, as
kafka-log-dirs.sh --describe prints them (DescribeLogDirs).

``--broker-list 0,1`` (default: every broker) and ``--topic-list a,b`` (default: every topic)
narrow the query; a broker that is not in the cluster is an error. The answer is one line of
JSON on stdout, in Kafka's format::

    {"version":1,"brokers":[{"broker":0,"logDirs":[{"logDir":"/data","error":null,
     "partitions":[{"partition":"t-0","size":123,"offsetLag":0,"isFuture":false}]}]}]}

``error`` is the Kafka error name of a failed log directory (Kafka prints its Java exception
class). The "Querying …" / "Received …" lines go to stderr, so stdout stays parseable.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from strom.cli.client_props import add_client_config, admin_options
from strom.cli.common import UsageError, parse_int_list
from strom.client.admin_types import LogDirDescription
from strom.client.sync import SyncAdminClient
from strom.common.errors import error_for


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("log-dirs", help="brokers' log directories and partition sizes "
                                        "(kafka-log-dirs)",
                       description="Describe the log directories of brokers as JSON.")
    p.add_argument("--describe", action="store_true",
                   help="accepted for kafka-log-dirs.sh compatibility (describing is all "
                        "this command does)")
    p.add_argument("--broker-list", metavar="ID[,ID…]", default="",
                   help="only these brokers (default: every broker)")
    p.add_argument("--topic-list", metavar="TOPIC[,TOPIC…]", default="",
                   help="only partitions of these topics (default: every topic)")
    add_client_config(p, "admin")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    asked = parse_int_list(args.broker_list, "--broker-list")
    topics = {t.strip() for t in args.topic_list.split(",") if t.strip()}
    with SyncAdminClient(**admin_options(args)) as admin:
        existing = sorted(b.node_id for b in admin.describe_cluster().brokers)
        unknown = sorted(set(asked) - set(existing))
        if unknown:
            raise UsageError(
                f"the given brokers do not exist from --broker-list: "
                f"{','.join(map(str, unknown))}. Current existent brokers: "
                f"{','.join(map(str, existing))}")
        brokers = sorted(set(asked)) or existing
        print("Querying brokers for log directories information", file=sys.stderr)
        described = admin.describe_log_dirs(brokers)
    print(f"Received log directory information from brokers {','.join(map(str, brokers))}",
          file=sys.stderr)
    print(json.dumps(as_kafka_json(described, topics), separators=(",", ":")))
    return 0


def as_kafka_json(described: dict[int, list[LogDirDescription]],
                  topics: set[str]) -> dict[str, Any]:
    """kafka-log-dirs.sh's JSON document (version 1); only ``topics`` when not empty."""
    return {
        "version": 1,
        "brokers": [
            {"broker": broker, "logDirs": [_log_dir(d, topics) for d in dirs]}
            for broker, dirs in sorted(described.items())
        ],
    }


def _log_dir(d: LogDirDescription, topics: set[str]) -> dict[str, Any]:
    return {
        "logDir": d.path,
        "error": error_for(d.error_code).name if d.error_code else None,
        "partitions": [
            {"partition": f"{r.topic}-{r.partition}", "size": r.size,
             "offsetLag": r.offset_lag, "isFuture": r.is_future}
            for r in sorted(d.replicas, key=lambda r: (r.topic, r.partition))
            if not topics or r.topic in topics
        ],
    }
