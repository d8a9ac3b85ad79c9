"""Log cleaner benchmark: compaction throughput, and produce throughput next to the cleaner.

    python bench/cleaner_bench.py [--mb 200] [--keys 10000] [--record-bytes 100]

1. Fills a ``cleanup.policy=compact`` log with ``--mb`` MB of ``--record-bytes`` records
   over ``--keys`` keys (batches of ``--batch-records`` records, ``--codec``), rolls it, and
   times one cleaner pass: MB/s of log input compacted, in the worker process (the default)
   and in the calling thread (the fallback when no process can start).
2. Times a tight ``Log.append`` loop of realistic batches (a fresh ``bytearray`` copy per
   append, as the network layer hands them over) on a delete-policy log, on a compacted log
   (the append path decodes records to reject keyless ones), and on a compacted log while
   the cleaner compacts another freshly dirtied log of ``--mb`` MB: in its worker process
   (the default), and in-thread (fallback) with and without its GIL pacing.

Prints a Markdown table and the command line. Data goes to a temporary directory (``--dir``).
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from strom.common.clock import SystemClock
from strom.common.config import BrokerConfig, TopicConfig, validate_topic_configs
from strom.common.types import TopicPartition
from strom.protocol.records.builder import BatchBuilder
from strom.protocol.records.compression import codec_from_name
from strom.storage.cleaner import LogCleaner
from strom.storage.log import Log

CLOCK = SystemClock()


def topic_config(policy: str, segment_bytes: int) -> TopicConfig:
    raw = {"cleanup.policy": policy, "segment.bytes": str(segment_bytes),
           "min.cleanable.dirty.ratio": "0.01", "flush.messages": str(2**62)}
    return TopicConfig(BrokerConfig(), validate_topic_configs(raw))


def make_batches(count: int, records: int, record_bytes: int, keys: int, codec: int,
                 seed: int) -> list[bytes]:
    """``count`` distinct batches of keyed records (key ~10 bytes, value pads to size)."""
    rng = random.Random(seed)
    now = CLOCK.now_ms()
    out = []
    for _ in range(count):
        builder = BatchBuilder(compression=codec)
        for _ in range(records):
            key = b"key-%06d" % rng.randrange(keys)
            value = rng.randbytes(max(1, record_bytes - len(key) - 8))
            builder.append(now, key, value)
        out.append(builder.build())
    return out


def fill(plog: Log, batches: list[bytes], target_bytes: int) -> int:
    written = 0
    i = 0
    while written < target_bytes:
        batch = batches[i % len(batches)]
        plog.append(memoryview(bytearray(batch)), leader_epoch=0)
        written += len(batch)
        i += 1
    plog.roll()
    return written


def produce_loop(plog: Log, batches: list[bytes], seconds: float) -> tuple[float, float, float]:
    """(MB/s, batches/s, p99 append latency in µs) of a tight append loop."""
    latencies = []
    written = 0
    i = 0
    start = time.perf_counter()
    end = start + seconds
    now = start
    while now < end:
        batch = batches[i % len(batches)]
        buf = memoryview(bytearray(batch))
        t0 = time.perf_counter()
        plog.append(buf, leader_epoch=0)
        now = time.perf_counter()
        latencies.append(now - t0)
        written += len(batch)
        i += 1
    elapsed = now - start
    p99 = statistics.quantiles(latencies, n=100)[98] * 1e6
    return written / elapsed / 1e6, i / elapsed, p99


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=200, help="MB of records to compact")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--batch-records", type=int, default=100)
    parser.add_argument("--codec", default="none", help="none, gzip, snappy, lz4, zstd")
    parser.add_argument("--segment-mb", type=int, default=64)
    parser.add_argument("--produce-seconds", type=float, default=5.0)
    parser.add_argument("--throttle-mb", type=int, default=10,
                        help="the cleaner's I/O cap for the throttled run (MB/s)")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()

    codec = 0 if args.codec == "none" else int(codec_from_name(args.codec))
    root = Path(tempfile.mkdtemp(prefix="cleaner-bench-", dir=args.dir))
    segment_bytes = args.segment_mb * 1024 * 1024
    target = args.mb * 1_000_000
    rows: list[tuple[str, str]] = []
    try:
        batches = make_batches(500, args.batch_records, args.record_bytes, args.keys, codec, 1)
        # -- 1. cleaner throughput ----------------------------------------------------------
        big = Log.open(root / "big-0", topic_config("compact", segment_bytes), clock=CLOCK)
        t0 = time.perf_counter()
        written = fill(big, batches, target)
        fill_s = time.perf_counter() - t0
        rows.append(("log filled (Log.append, compact policy)",
                     f"{written / 1e6:.0f} MB in {fill_s:.1f} s "
                     f"({written / fill_s / 1e6:.1f} MB/s)"))
        for label, use_process in (("worker process", True),
                                   ("in-thread fallback, GIL yield every 0.5 ms", False)):
            if not use_process:
                fill(big, batches, target)
            cleaner = LogCleaner(root, lambda: [(TopicPartition("big", 0), big)], CLOCK,
                                 use_process=use_process)
            t0 = time.perf_counter()
            assert cleaner.clean_once()  # includes starting the worker process
            clean_s = time.perf_counter() - t0
            cleaner.stop()
            stats = cleaner.stats()
            rows.append((f"**cleaner pass: input compacted** ({label})",
                         f"**{stats.input_bytes / 1e6:.0f} MB in {clean_s:.1f} s = "
                         f"{stats.input_bytes / clean_s / 1e6:.1f} MB/s** "
                         f"({stats.bytes_read / 1e6:.0f} MB read: map + rewrite)"))
        rows.append(("cleaner pass: output / records removed",
                     f"{big.size_in_bytes() / 1e6:.2f} MB left, "
                     f"{stats.records_removed:,} records removed"))

        # -- 2. produce throughput ----------------------------------------------------------
        produce_batches = make_batches(200, args.batch_records, args.record_bytes, args.keys,
                                       codec, 2)
        results = {}
        for name, policy in (("delete policy, no cleaner", "delete"),
                             ("compact policy, no cleaner", "compact")):
            plog = Log.open(root / f"{policy}-0", topic_config(policy, segment_bytes),
                            clock=CLOCK)
            results[name] = produce_loop(plog, produce_batches, args.produce_seconds)
            plog.close()
        # Re-dirty the big log, then produce while the cleaner thread compacts it.
        overlaps: list[tuple[str, int]] = []
        variants = (("default: worker process", True, 0.5, None),
                    (f"worker process + I/O cap {args.throttle_mb} MB/s", True, 0.5,
                     args.throttle_mb * 1e6),
                    ("in-thread fallback: GIL yield every 0.5 ms", False, 0.5, None),
                    ("in-thread, GIL yield disabled", False, 0.0, None))
        for label, use_process, yield_ms, rate in variants:
            fill(big, batches, target)
            plog = Log.open(root / f"busy{len(overlaps)}-0",
                            topic_config("compact", 16 * 1024 * 1024), clock=CLOCK)
            logs = [(TopicPartition("big", 0), big), (TopicPartition("busy", 0), plog)]
            busy = LogCleaner(root, lambda logs=logs: logs,  # type: ignore[misc]
                              CLOCK, backoff_ms=10, max_io_bytes_per_second=rate,
                              yield_interval_ms=yield_ms, use_process=use_process)
            busy.start()
            deadline = time.monotonic() + 30
            while use_process and busy.worker_pid is None and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.2)  # the pass over the big log is under way
            name = f"compact policy, cleaner compacting concurrently ({label})"
            results[name] = produce_loop(plog, produce_batches, args.produce_seconds)
            passes = busy.stats().passes
            busy.stop()
            overlaps.append((label, passes))
            plog.close()
        for name, (mbs, bps, p99) in results.items():
            rows.append((f"produce: {name}",
                         f"{mbs:.0f} MB/s, {bps:,.0f} batches/s, p99 append {p99:.0f} µs"))
        for label, passes in overlaps:
            rows.append((f"cleaner passes finished during the produce run ({label})",
                         f"{passes} (0: compacting throughout)"))
        big.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    batch_bytes = len(batches[0])
    print(f"\nCommand: `python {' '.join(sys.argv)}`\n")
    print(f"{args.record_bytes}-byte records over {args.keys:,} keys, {args.batch_records} "
          f"records per batch (~{batch_bytes:,} bytes, codec {args.codec}), "
          f"{args.segment_mb} MB segments, Python {sys.version.split()[0]}\n")
    print("| measurement | result |")
    print("|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
