"""``strom consume TOPIC``: print records, one per line, like kafka-console-consumer.

Start position: the end (new records only) unless ``--from-beginning``, ``--offset N`` or
``--from-timestamp`` — or, with ``--group``, the group's committed offsets
(:mod:`strom.cli.consume_group`, which also says what ``--group`` does and does not do).
Each line holds the requested fields in this order, joined by ``--separator`` (default a
tab): ``CreateTime:<ms>`` (or ``LogAppendTime:``), ``Partition:<p>``, ``Offset:<o>``,
headers as ``k:v,k:v`` (``NO_HEADERS`` when none), the key and the value (``null`` for
null). Exits after ``--max-messages`` records, after ``--timeout-ms`` without a new record,
or on Ctrl-C / SIGTERM; prints the count on stderr. Client settings: ``--consumer-property``
and ``--command-config`` (:mod:`strom.cli.client_props`).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any, BinaryIO

from strom.cli.client_props import add_client_config, client_settings
from strom.cli.common import (
    UsageError,
    decode_escapes,
    non_negative,
    parse_timestamp,
    positive,
)
from strom.cli.consume_group import DEFAULT_COMMIT_INTERVAL_MS, GroupOffsets
from strom.client.properties import CONSUMER, GROUP_KEYWORDS, MEMBER_KEYWORDS, client_options
from strom.client.records import ConsumerRecord
from strom.client.sync import SyncAdminClient, SyncFetcher


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
    p.add_argument("--group", metavar="GROUP",
                   help="start from GROUP's committed offsets and commit progress to it "
                        "(not a group member: see the README)")
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
                   default=None, help="skip aborted transactions when read_committed "
                                      "(default read_uncommitted)")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="no summary on stderr")
    add_client_config(p, "consumer")
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


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """Client keyword arguments from the properties and flags, checked as Kafka's console
    consumer checks them (one group id, --from-beginning agreeing with auto.offset.reset)."""
    properties = client_settings(args, "consumer")
    if args.group is not None:
        given = properties.get("group.id")
        if given is not None and given != args.group:
            raise UsageError(f"the group ids given by --group ({args.group!r}) and by the "
                             f"consumer properties ({given!r}) do not match")
        properties["group.id"] = args.group
    reset = properties.get("auto.offset.reset")
    if args.from_beginning and reset is not None and reset.strip().lower() != "earliest":
        raise UsageError(f"--from-beginning contradicts auto.offset.reset={reset}; "
                         "remove one of them")
    if args.from_beginning:
        properties["auto.offset.reset"] = "earliest"
    if args.isolation_level is not None:
        properties["isolation.level"] = args.isolation_level
    options = client_options("consumer", properties)
    member_only = sorted(key for key, (kw, _) in CONSUMER.items()
                         if kw in MEMBER_KEYWORDS and kw in options)
    if member_only:
        raise UsageError(f"{', '.join(member_only)}: a setting of the group consumer "
                         "(strom.client.Consumer); strom consume reads partitions itself and "
                         "only tracks the group's offsets")
    options.setdefault("auto_offset_reset", "latest")
    if options.get("group_id") is not None:
        if args.partition or args.offset is not None or args.from_timestamp:
            raise UsageError("--group cannot be combined with --partition, --offset or "
                             "--from-timestamp (the group's offsets decide where to start; "
                             "move them with strom groups reset-offsets)")
    elif options.get("enable_auto_commit"):
        raise UsageError("enable.auto.commit=true needs a group (--group or group.id)")
    return options


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM ends the loop like Ctrl-C, so progress is flushed and committed."""

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(args: argparse.Namespace) -> int:
    start = _start_offset(args.offset) if args.offset is not None else None
    timestamp = parse_timestamp(args.from_timestamp) if args.from_timestamp else None
    options = _settings(args)
    group_settings = {k: options.pop(k) for k in GROUP_KEYWORDS if k in options}
    group_id = group_settings.get("group_id")
    formatter = Formatter(args)
    wait_ms = 500 if args.timeout_ms is None else max(min(500, args.timeout_ms), 10)
    options.setdefault("max_wait_ms", wait_ms)
    out: BinaryIO = sys.stdout.buffer
    count = 0
    with contextlib.ExitStack() as stack:
        stack.enter_context(_sigterm_interrupts())
        fetcher = stack.enter_context(SyncFetcher(**options))
        partitions = fetcher.assign_topic(args.topic, args.partition)
        group: GroupOffsets | None = None
        if group_id is not None:
            admin = stack.enter_context(SyncAdminClient(**{
                k: v for k, v in options.items()
                if k in ("bootstrap", "client_id", "request_timeout_s", "security")}))
            group = GroupOffsets(
                admin, group_id,
                auto_commit=group_settings.get("enable_auto_commit", True),
                interval_ms=group_settings.get("auto_commit_interval_ms",
                                               DEFAULT_COMMIT_INTERVAL_MS))
            group.start(fetcher, partitions, options["auto_offset_reset"])
        elif start == "earliest" or (start is None and timestamp is None
                                     and options["auto_offset_reset"] == "earliest"):
            fetcher.seek_to_beginning()
        elif start == "latest" or (start is None and timestamp is None
                                   and options["auto_offset_reset"] == "latest"):
            fetcher.seek_to_end()
        elif timestamp is not None:
            fetcher.seek_to_timestamp(timestamp)
        elif isinstance(start, int):
            for tp in partitions:
                fetcher.seek(tp, start)
        last_record = time.monotonic()
        try:
            while args.max_messages is None or count < args.max_messages:
                records = fetcher.poll()
                if records:
                    last_record = time.monotonic()
                before = count
                for record in records:
                    out.write(formatter.line(record))
                    count += 1
                    if group is not None:
                        group.printed(record)
                    if args.max_messages is not None and count >= args.max_messages:
                        break
                out.flush()
                if group is not None:
                    if count - before == len(records):
                        group.caught_up(fetcher)
                    group.maybe_commit()
                if args.timeout_ms is not None and not records and \
                        (time.monotonic() - last_record) * 1000 >= args.timeout_ms:
                    break
        except KeyboardInterrupt:
            pass
        out.flush()
        if group is not None:
            group.commit()
    if not args.quiet:
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0
