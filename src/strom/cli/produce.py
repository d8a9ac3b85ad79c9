"""``strom produce TOPIC``: one record per stdin line.

With ``--key-separator SEP`` each line is split at the first SEP into key and value (a line
without SEP is an error). ``--header k=v`` adds a header to every record. Delivery errors are
counted; the first one is reported and the exit status is 1 if any record failed. Any producer
setting: ``--producer-property`` and ``--command-config`` (:mod:`strom.cli.client_props`);
``--acks``, ``--compression``, ``--idempotent``, ``--linger-ms`` and ``--batch-size``, when
given, override them.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
import time
from collections.abc import Iterator
from typing import BinaryIO

from strom.cli.client_props import add_client_config, client_settings
from strom.cli.common import (
    Progress,
    UsageError,
    acks_value,
    decode_escapes,
    non_negative,
    parse_key_values,
    positive,
)
from strom.client.properties import client_options
from strom.client.records import CODECS, RecordMetadata
from strom.client.sync import SyncProducer
from strom.common.errors import KafkaError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("produce", help="write stdin lines to a topic",
                       description="Produce one record per line read from stdin.")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--key-separator", metavar="SEP",
                   help="split each line at the first SEP into key and value")
    p.add_argument("--header", action="append", default=[], metavar="KEY=VALUE",
                   help="add a header to every record; repeatable")
    p.add_argument("--partition", type=non_negative, default=None,
                   help="write every record to this partition (default: by key / sticky)")
    p.add_argument("--acks", type=acks_value, default=None,
                   help="0, 1 or all (default all)")
    p.add_argument("--compression", choices=sorted(CODECS), default=None,
                   help="batch compression codec (default none)")
    p.add_argument("--idempotent", action="store_true",
                   help="enable idempotence (producer id + sequence numbers; needs acks=all)")
    p.add_argument("--linger-ms", type=non_negative, default=None,
                   help="wait up to this long to fill a batch (default 5)")
    p.add_argument("--batch-size", type=positive, default=None,
                   help="batch size in bytes (default 16384)")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="no progress or summary on stderr")
    add_client_config(p, "producer")
    p.set_defaults(run=run)


class _Tally:
    """Counts acknowledgements and failures from the producer's futures (any thread)."""

    def __init__(self) -> None:
        self.acked = 0
        self.failed = 0
        self.first_error: BaseException | None = None

    def done(self, future: concurrent.futures.Future[RecordMetadata]) -> None:
        error = future.exception()
        if error is None:
            self.acked += 1
            return
        self.failed += 1
        if self.first_error is None:
            self.first_error = error


def run(args: argparse.Namespace) -> int:
    headers = [(k, v.encode("utf-8")) for k, v in parse_key_values(args.header, "--header").items()]
    separator = decode_escapes(args.key_separator).encode("utf-8") if args.key_separator else None
    if separator is not None and not separator:
        raise UsageError("--key-separator must not be empty")
    if args.idempotent and args.acks not in (None, -1):
        raise UsageError("--idempotent needs --acks all")
    options = client_options("producer", client_settings(args, "producer", {
        "acks": None if args.acks is None else str(args.acks),
        "compression.type": args.compression,
        "enable.idempotence": "true" if args.idempotent else None,
        "linger.ms": None if args.linger_ms is None else str(args.linger_ms),
        "batch.size": None if args.batch_size is None else str(args.batch_size),
    }))
    # As Kafka's console producer: lines are bytes, so key/value serializer settings are
    # overridden by the bytes serializer (a configured StringSerializer would refuse them).
    options.pop("key_serializer", None)
    options.pop("value_serializer", None)
    progress = Progress(enabled=not args.quiet)
    tally = _Tally()
    started = time.monotonic()
    sent = 0
    with SyncProducer(**options) as producer:
        try:
            for number, key, value in _records(sys.stdin.buffer, separator):
                future = producer.send(args.topic, value, key, headers or None, args.partition)
                future.add_done_callback(tally.done)
                sent += 1
                if tally.first_error is not None and isinstance(tally.first_error, KafkaError) \
                        and not tally.first_error.retriable:
                    break
                if progress.due():
                    progress.say(f"produce: {sent} records sent, {tally.acked} acknowledged "
                                 f"(line {number})")
        finally:
            producer.flush()
    elapsed = time.monotonic() - started
    if tally.failed:
        print(f"strom produce: error: {tally.failed} of {sent} records failed; first error: "
              f"{tally.first_error}", file=sys.stderr)
        return 1
    if not args.quiet:
        progress.say(f"produce: {tally.acked} records written to {args.topic} in {elapsed:.2f}s")
    return 0


def _records(
    stream: BinaryIO, separator: bytes | None
) -> Iterator[tuple[int, bytes | None, bytes]]:
    """(line number, key, value) for each line; the line break is not part of the value."""
    for number, raw in enumerate(stream, 1):
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if line.endswith(b"\r"):
            line = line[:-1]
        if separator is None:
            yield number, None, line
            continue
        key, sep, value = line.partition(separator)
        if not sep:
            raise UsageError(
                f"line {number} has no key separator {separator.decode('utf-8', 'replace')!r}"
            )
        yield number, key, value

