"""``strom consume TOPIC``: print records, one per line, like kafka-console-consumer.

Start position: the end (new records only) unless ``--from-beginning``, ``--offset N`` or
``--from-timestamp``. Each line holds the requested fields in this order, joined by
``--separator`` (default a tab): ``CreateTime:<ms>`` (or ``LogAppendTime:``),
``Partition:<p>``, ``Offset:<o>``, headers as ``k:v,k:v`` (``NO_HEADERS`` when none), the key
and the value (``null`` for null). Exits after ``--max-messages`` records, after
``--timeout-ms`` without a new record, or on Ctrl-C; prints the count on stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import BinaryIO

from strom.cli.common import (
    UsageError,
    add_bootstrap,
    decode_escapes,
    non_negative,
    parse_timestamp,
    positive,
)
from strom.client.records import ConsumerRecord
from strom.client.sync import SyncFetcher


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("consume", help="print records from a topic",
                       description="Print records of a topic to stdout, one per line.")
    p.add_argument("topic", metavar="TOPIC")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the earliest offset (default: only new records)")
    start.add_argument("--offset", metavar="N",
                       help="start at offset N (or 'earliest' / 'latest') in each partition")
    start.add_argument("--from-timestamp", metavar="MS|ISO-8601",
                       help="start at the first record at or after this time")
    p.add_argument("--partition", type=non_negative, action="append", default=None,
                   metavar="P", help="only this partition; repeatable (default: all)")
    p.add_argument("--max-messages", type=positive, default=None, metavar="N",
                   help="exit after N records")
    p.add_argument("--timeout-ms", type=positive, default=None, metavar="MS",
                   help="exit when no record arrived for this long")
    p.add_argument("--print-key", action="store_true", help="print the key")
    p.add_argument("--print-timestamp", action="store_true", help="print the timestamp")
    p.add_argument("--print-headers", action="store_true", help="print the headers")
    p.add_argument("--print-offset", action="store_true", help="print the offset")
    p.add_argument("--print-partition", action="store_true", help="print the partition")
    p.add_argument("--separator", default="\\t", metavar="SEP",
                   help="between printed fields (default a tab; escapes such as \\t work)")
    p.add_argument("--isolation-level", choices=("read_uncommitted", "read_committed"),
                   default="read_uncommitted", help="skip aborted transactions when committed")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="no summary on stderr")
    add_bootstrap(p)
    p.set_defaults(run=run)


class Formatter:
    """Renders records as lines of bytes according to the --print-* options."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.separator = decode_escapes(args.separator).encode("utf-8")
        self.key = args.print_key
        self.timestamp = args.print_timestamp
        self.headers = args.print_headers
        self.offset = args.print_offset
        self.partition = args.print_partition

    def line(self, record: ConsumerRecord) -> bytes:
        fields: list[bytes] = []
        if self.timestamp:
            kind = "LogAppendTime" if record.timestamp_type == 1 else "CreateTime"
            fields.append(f"{kind}:{record.timestamp}".encode())
        if self.partition:
            fields.append(f"Partition:{record.partition}".encode())
        if self.offset:
            fields.append(f"Offset:{record.offset}".encode())
        if self.headers:
            fields.append(
                b",".join(k.encode("utf-8") + b":" + _bytes(v) for k, v in record.headers)
                if record.headers else b"NO_HEADERS"
            )
        if self.key:
            fields.append(_bytes(record.key))
        fields.append(_bytes(record.value))
        return self.separator.join(fields) + b"\n"


def _bytes(data: bytes | None) -> bytes:
    return b"null" if data is None else data


def _start_offset(text: str) -> int | str:
    value = text.strip().lower()
    if value in ("earliest", "latest"):
        return value
    try:
        offset = int(value)
    except ValueError:
        raise UsageError(f"--offset expects a number, 'earliest' or 'latest', got {text!r}") \
            from None
    if offset < 0:
        raise UsageError(f"--offset must be ≥ 0, got {offset}")
    return offset


def run(args: argparse.Namespace) -> int:
    start = _start_offset(args.offset) if args.offset is not None else None
    timestamp = parse_timestamp(args.from_timestamp) if args.from_timestamp else None
    formatter = Formatter(args)
    wait_ms = 500 if args.timeout_ms is None else max(min(500, args.timeout_ms), 10)
    out: BinaryIO = sys.stdout.buffer
    count = 0
    with SyncFetcher(
        args.bootstrap_server,
        max_wait_ms=wait_ms,
        isolation_level=1 if args.isolation_level == "read_committed" else 0,
        auto_offset_reset="earliest" if args.from_beginning else "latest",
        request_timeout_s=args.request_timeout_ms / 1000,
    ) as fetcher:
        partitions = fetcher.assign_topic(args.topic, args.partition)
        if args.from_beginning or start == "earliest":
            fetcher.seek_to_beginning()
        elif start == "latest" or (start is None and timestamp is None):
            fetcher.seek_to_end()
        elif timestamp is not None:
            fetcher.seek_to_timestamp(timestamp)
        else:
            assert isinstance(start, int)
            for tp in partitions:
                fetcher.seek(tp, start)
        last_record = time.monotonic()
        try:
            while args.max_messages is None or count < args.max_messages:
                records = fetcher.poll()
                if records:
                    last_record = time.monotonic()
                for record in records:
                    out.write(formatter.line(record))
                    count += 1
                    if args.max_messages is not None and count >= args.max_messages:
                        break
                out.flush()
                if args.timeout_ms is not None and not records and \
                        (time.monotonic() - last_record) * 1000 >= args.timeout_ms:
                    break
        except KeyboardInterrupt:
            pass
    out.flush()
    if not args.quiet:
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0
