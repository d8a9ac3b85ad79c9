"""``strom delete-records``: move partitions' log start offset forward, as
kafka-delete-records.sh does (DeleteRecords).

Which partitions and offsets: ``--offset-json-file FILE`` in Kafka's format
``{"partitions": [{"topic": "t", "partition": 0, "offset": 5}], "version": 1}``, or
``--topic T [--partition P]… --offset O`` (every partition of T without ``--partition``).
Offset -1 means the high watermark (delete everything). Output, one line per partition in
topic / partition order: ``partition: t-0<TAB>low_watermark: 5``, or
``partition: t-0<TAB>error: <Kafka error>``; exit status 1 when any partition failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from strom.cli.client_props import add_client_config, admin_options
from strom.cli.common import UsageError, non_negative
from strom.client.sync import SyncAdminClient
from strom.common.errors import KafkaError
from strom.common.types import TopicPartition

JSON_FORMAT = '{"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], "version": 1}'


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("delete-records", help="delete records before an offset "
                                              "(kafka-delete-records)",
                       description="Delete the records of partitions before the given offsets "
                                   "(they become the partitions' log start offsets).")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--offset-json-file", metavar="FILE",
                       help=f"the partitions and offsets, as Kafka's tool takes them: "
                            f"{JSON_FORMAT}")
    which.add_argument("--topic", metavar="TOPIC", help="delete from this topic (with --offset)")
    p.add_argument("--partition", type=non_negative, action="append", default=None,
                   metavar="P", help="only this partition of --topic; repeatable "
                                     "(default: all)")
    p.add_argument("--offset", type=int, metavar="O",
                   help="delete the records before offset O (-1: all records, up to the "
                        "high watermark)")
    add_client_config(p, "admin")
    p.set_defaults(run=run)


def parse_offset_json(text: str, source: str = "offset JSON") -> dict[TopicPartition, int]:
    """Kafka's offset JSON (version 1) as partition → offset; UsageError when malformed or
    when a partition appears twice."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{source} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{source} must be a JSON object such as {JSON_FORMAT}")
    version = data.get("version", 1)
    if version != 1:
        raise UsageError(f"{source}: unsupported version {version!r} (only 1)")
    entries = data.get("partitions")
    if not isinstance(entries, list):
        raise UsageError(f"{source} has no \"partitions\" list")
    out: dict[TopicPartition, int] = {}
    duplicates: list[str] = []
    for entry in entries:
        tp, offset = _entry(entry, source)
        if tp in out:
            duplicates.append(str(tp))
        out[tp] = offset
    if duplicates:
        raise UsageError(f"{source} contains duplicate topic partitions: "
                         f"{', '.join(sorted(set(duplicates)))}")
    return out


def _entry(entry: Any, source: str) -> tuple[TopicPartition, int]:
    if not isinstance(entry, dict):
        raise UsageError(f"{source}: each partition must be an object like "
                         '{"topic": "foo", "partition": 1, "offset": 1}')
    topic, partition, offset = entry.get("topic"), entry.get("partition"), entry.get("offset")
    if not isinstance(topic, str) or not topic:
        raise UsageError(f"{source}: a partition entry lacks a \"topic\" string: {entry}")
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise UsageError(f"{source}: \"partition\" must be an integer ≥ 0 in {entry}")
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise UsageError(f"{source}: \"offset\" must be an integer in {entry}")
    return TopicPartition(topic, partition), _checked_offset(offset)


def _checked_offset(offset: int) -> int:
    if offset < -1:
        raise UsageError(f"offset must be ≥ 0, or -1 for the high watermark, got {offset}")
    return offset


def run(args: argparse.Namespace) -> int:
    plan: dict[TopicPartition, int] = {}
    if args.offset_json_file is not None:
        if args.offset is not None or args.partition:
            raise UsageError("--offset-json-file cannot be combined with --partition or "
                             "--offset")
        path = Path(args.offset_json_file)
        plan = parse_offset_json(path.read_text(encoding="utf-8"), str(path))
        if not plan:
            raise UsageError(f"{path} names no partitions")
    elif args.offset is None:
        raise UsageError("--topic needs --offset")
    offset = None if args.offset is None else _checked_offset(args.offset)
    with SyncAdminClient(**admin_options(args)) as admin:
        if args.topic is not None and offset is not None:
            partitions = args.partition
            if partitions is None:
                [topic] = admin.describe_topics([args.topic])
                partitions = [p.partition for p in topic.partitions]
            plan = {TopicPartition(args.topic, p): offset for p in partitions}
        print("Executing records delete operation", file=sys.stderr)
        results = admin.delete_records(plan, partial=True)
    print("Records delete operation completed:", file=sys.stderr)
    failed = 0
    for tp in sorted(results):
        result = results[tp]
        if isinstance(result, KafkaError):
            failed += 1
            print(f"partition: {tp}\terror: {result}")
        else:
            print(f"partition: {tp}\tlow_watermark: {result}")
    if failed:
        print(f"strom delete-records: error: {failed} of {len(results)} partitions failed",
              file=sys.stderr)
        return 1
    return 0
