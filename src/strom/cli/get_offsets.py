"""``strom get-offsets``: partition offsets by time, as kafka-get-offsets.sh prints them
(ListOffsets).

``--topic`` is a regular expression matched against whole topic names (every topic when
left out; internal ones too unless ``--exclude-internal-topics``), ``--partitions`` a comma
list. ``--time``: ``-1`` / ``latest`` (the default: the high watermark), ``-2`` / ``earliest``
(the log start offset), ``-3`` / ``max-timestamp`` (the record with the largest timestamp),
``-4`` / ``earliest-local``, ``-5`` / ``latest-tiered``, or a time (ms since the epoch or
ISO-8601): the first offset whose timestamp is at or after it. Prints ``topic:partition:offset``
per partition in topic / partition order, leaving out partitions with no such offset (a time
after the last record), as Kafka does. A partition that fails is reported on stderr and makes
the exit status 1.
"""

from __future__ import annotations

import argparse
import re
import sys

from strom.cli.client_props import add_client_config, admin_options
from strom.cli.common import UsageError, parse_int_list, parse_timestamp
from strom.client.admin_types import OffsetSpec
from strom.client.sync import SyncAdminClient
from strom.common.errors import KafkaError
from strom.common.types import TopicPartition

NAMED_TIMES = {
    "latest": OffsetSpec.LATEST,
    "earliest": OffsetSpec.EARLIEST,
    "max-timestamp": OffsetSpec.MAX_TIMESTAMP,
    "earliest-local": OffsetSpec.EARLIEST_LOCAL,
    "latest-tiered": OffsetSpec.LATEST_TIERED,
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("get-offsets", help="offsets of partitions by time (kafka-get-offsets)",
                       description="Print topic:partition:offset for the offset at --time.")
    p.add_argument("--topic", metavar="REGEX",
                   help="topics whose whole name matches REGEX (default: every topic)")
    p.add_argument("--partitions", metavar="P[,P…]",
                   help="only these partitions (default: all)")
    p.add_argument("--time", default="latest", metavar="TIME",
                   help="-1/latest (default), -2/earliest, -3/max-timestamp, "
                        "-4/earliest-local, -5/latest-tiered, or a time in ms since the "
                        "epoch / ISO-8601 (the first offset at or after it)")
    p.add_argument("--exclude-internal-topics", action="store_true",
                   help="leave out internal topics such as __consumer_offsets")
    add_client_config(p, "admin")
    p.set_defaults(run=run)


def parse_time(text: str) -> int:
    """The ListOffsets timestamp for ``--time``: a sentinel (negative) or ms since the epoch."""
    value = text.strip().lower()
    if value in NAMED_TIMES:
        return NAMED_TIMES[value]
    try:
        number = parse_timestamp(text)
    except UsageError:
        number = None
    if number is None or (number < 0 and number not in NAMED_TIMES.values()):
        raise UsageError(f"malformed --time {text!r}: use -1 or latest, -2 or earliest, "
                         "-3 or max-timestamp, -4 or earliest-local, -5 or latest-tiered, "
                         "or a time (ms since the epoch or ISO-8601)")
    return number


def _topic_filter(pattern: str | None) -> re.Pattern[str]:
    try:
        return re.compile(pattern if pattern is not None else ".*")
    except re.error as exc:
        raise UsageError(f"--topic is not a valid regular expression: {exc}") from None


def run(args: argparse.Namespace) -> int:
    spec = parse_time(args.time)
    wanted = None if args.partitions is None else set(parse_int_list(args.partitions,
                                                                     "--partitions"))
    topic_filter = _topic_filter(args.topic)
    with SyncAdminClient(**admin_options(args)) as admin:
        names = [t for t in admin.list_topics(include_internal=not args.exclude_internal_topics)
                 if topic_filter.fullmatch(t)]
        partitions = [
            TopicPartition(t.name, p.partition)
            for t in (admin.describe_topics(names) if names else [])
            for p in t.partitions
            if wanted is None or p.partition in wanted
        ]
        if not partitions:
            raise UsageError("could not match any topic-partitions with the specified filters")
        found = admin.list_offsets(dict.fromkeys(partitions, spec), partial=True)
    failed = 0
    for tp in sorted(found):
        answer = found[tp]
        if isinstance(answer, KafkaError):
            failed += 1
            print(f"Skip getting offsets for topic-partition {tp} due to error: {answer}",
                  file=sys.stderr)
        elif answer.offset >= 0:
            print(f"{tp.topic}:{tp.partition}:{answer.offset}")
    if failed:
        print(f"strom get-offsets: error: {failed} of {len(found)} partitions failed",
              file=sys.stderr)
        return 1
    return 0
