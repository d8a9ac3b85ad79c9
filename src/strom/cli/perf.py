"""``strom perf produce`` / ``strom perf consume``: load tests like Kafka's perf-test tools.

``produce`` sends ``--num-records`` records of ``--record-size`` random letters (one payload,
as kafka-producer-perf-test does), optionally throttled to ``--throughput`` records/s, and
reports records/s, MB/s and send-to-acknowledgement latency (avg, max, p50/p95/p99/p99.9).
``consume`` reads ``--num-records`` records from the beginning of every partition and reports
records/s, MB/s and fetch round-trip latency. Progress lines go to stderr every
``--reporting-interval`` ms; the summary goes to stdout. Both use the asyncio clients
directly (no thread hop per record). Client settings (TLS, SASL, …) come as in ``strom
produce`` / ``consume`` (:mod:`strom.cli.client_props`: ``--command-config``,
``--producer.config`` / ``--consumer.config``, ``--*-property``), under the flags given.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import random
import string
import sys
import time
from typing import Any

from strom.cli.client_props import add_client_config, client_settings
from strom.cli.common import UsageError, acks_value, non_negative, positive
from strom.cli.perf_stats import MB, Stats, Throttle, percentile
from strom.client.fetcher import Fetcher
from strom.client.producer import Producer
from strom.client.properties import GROUP_KEYWORDS, client_options
from strom.client.records import CODECS, RecordMetadata


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("perf", help="producer / consumer load tests",
                       description="Measure produce or consume throughput and latency.")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    pp = actions.add_parser("produce", help="producer throughput and latency")
    pp.add_argument("--topic", required=True)
    pp.add_argument("--num-records", type=positive, required=True)
    pp.add_argument("--record-size", type=non_negative, required=True, metavar="BYTES")
    pp.add_argument("--throughput", type=float, default=-1, metavar="RECORDS_PER_S",
                    help="throttle to this many records/s (default -1: no limit)")
    pp.add_argument("--acks", type=acks_value, help="0, 1 or all (default all)")
    pp.add_argument("--compression", choices=sorted(CODECS), help="(default none)")
    pp.add_argument("--batch-size", type=positive, metavar="BYTES", help="(default 16384)")
    pp.add_argument("--linger-ms", type=non_negative, help="(default 5)")
    pp.add_argument("--idempotent", action="store_const", const="true")
    pp.add_argument("--key-cardinality", type=non_negative, default=0, metavar="N",
                    help="use N distinct keys (default 0: no keys)")
    _add_reporting(pp)
    add_client_config(pp, "producer")
    pp.set_defaults(run=run_produce)

    pc = actions.add_parser("consume", help="consumer throughput")
    pc.add_argument("--topic", required=True)
    pc.add_argument("--num-records", type=positive, required=True)
    pc.add_argument("--timeout-ms", type=positive, default=10000,
                    help="give up after this long without records (default 10000)")
    pc.add_argument("--fetch-size", type=positive, metavar="BYTES",
                    help="max bytes per partition per fetch (default 1 MiB)")
    _add_reporting(pc)
    add_client_config(pc, "consumer")
    pc.set_defaults(run=run_consume)


def _add_reporting(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reporting-interval", type=positive, default=5000, metavar="MS",
                        help="progress line interval (default 5000)")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress lines")


def _progress(args: argparse.Namespace, line: str) -> None:
    if not args.quiet:
        print(line, file=sys.stderr, flush=True)


def _producer_options(args: argparse.Namespace) -> dict[str, Any]:
    """Producer arguments: properties (file, --producer-property), then the flags given."""
    flags = {"acks": None if args.acks is None else str(args.acks),
             "compression.type": args.compression,
             "batch.size": None if args.batch_size is None else str(args.batch_size),
             "linger.ms": None if args.linger_ms is None else str(args.linger_ms),
             "enable.idempotence": args.idempotent}
    return client_options("producer", client_settings(args, "producer", flags))


def _fetcher_options(args: argparse.Namespace) -> dict[str, Any]:
    """Fetcher arguments: properties, then the flags given; always from the earliest
    offset and without a group."""
    flags = {"max.partition.fetch.bytes": None if args.fetch_size is None
             else str(args.fetch_size)}
    options = client_options("consumer", client_settings(args, "consumer", flags))
    grouped = [k for k in GROUP_KEYWORDS if k in options]
    if grouped:
        raise UsageError("strom perf consume reads every partition without a group; remove "
                         "group.id, enable.auto.commit and auto.commit.interval.ms")
    options["auto_offset_reset"] = "earliest"
    options.setdefault("max_wait_ms", min(500, args.timeout_ms))
    return options


def run_produce(args: argparse.Namespace) -> int:
    return asyncio.run(_produce(args))


async def _produce(args: argparse.Namespace) -> int:
    rng = random.Random()
    payload = "".join(rng.choices(string.ascii_uppercase, k=args.record_size)).encode()
    keys = [str(i).encode() for i in range(args.key_cardinality)]
    interval = args.reporting_interval / 1000
    failures: list[BaseException] = []
    size = len(payload)

    def completed(sent_at: float, future: asyncio.Future[RecordMetadata]) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if error is not None:
            failures.append(error)
            return
        stats.record((time.perf_counter() - sent_at) * 1000, size)

    async with Producer(**_producer_options(args)) as producer:
        stats = Stats(args.num_records)
        throttle = Throttle(args.throughput)
        next_report = time.monotonic() + interval
        for i in range(args.num_records):
            key = keys[i % len(keys)] if keys else None
            sent_at = time.perf_counter()
            future = await producer.send(args.topic, payload, key)
            future.add_done_callback(functools.partial(completed, sent_at))
            delay = throttle.delay(i + 1)
            if delay > 0:
                await asyncio.sleep(delay)
            if time.monotonic() >= next_report:
                next_report = time.monotonic() + interval
                _progress(args, stats.window_line())
            if failures:
                break
        await producer.flush()
    if failures:
        print(f"strom perf: error: {len(failures)} record(s) failed; first error: {failures[0]}",
              file=sys.stderr)
        return 1
    print(stats.summary())
    return 0


def run_consume(args: argparse.Namespace) -> int:
    return asyncio.run(_consume(args))


async def _consume(args: argparse.Namespace) -> int:
    interval = args.reporting_interval / 1000
    async with Fetcher(**_fetcher_options(args)) as fetcher:
        await fetcher.assign_topic(args.topic)
        await fetcher.seek_to_beginning()
        stats = Stats(args.num_records)
        fetch_latency = Stats(args.num_records)
        next_report = time.monotonic() + interval
        last_data = time.monotonic()
        while stats.count < args.num_records:
            started = time.perf_counter()
            records = await fetcher.fetch()
            now = time.monotonic()
            if records:
                last_data = now
                size = sum(len(r.value or b"") + len(r.key or b"") for r in records)
                fetch_latency.record((time.perf_counter() - started) * 1000, size)
                stats.add_bytes(len(records), size)
            elif (now - last_data) * 1000 >= args.timeout_ms:
                print(f"strom perf: warning: exiting after {stats.count} of {args.num_records} "
                      f"records: no records for {args.timeout_ms} ms", file=sys.stderr)
                break
            if now >= next_report:
                next_report = now + interval
                _progress(args, stats.window_line("records consumed", latency=False))
    elapsed = max(stats.elapsed_s, 1e-9)
    ordered = sorted(fetch_latency.samples)
    print(
        f"{stats.count} records consumed, {stats.count / elapsed:.1f} records/sec "
        f"({stats.bytes / MB / elapsed:.2f} MB/sec) in {elapsed:.2f} s, "
        f"{fetch_latency.count} fetches, fetch latency "
        f"{fetch_latency.latency_sum / max(fetch_latency.count, 1):.2f} ms avg, "
        f"{percentile(ordered, 0.5):.0f} ms 50th, {percentile(ordered, 0.99):.0f} ms 99th."
    )
    return 0 if stats.count >= args.num_records else 1
