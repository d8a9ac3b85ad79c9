"""Produce throughput of strom builds side by side, runs interleaved (a noisy machine hits all
builds alike): records/s seen by a librdkafka producer and the broker's CPU per record.

    python bench/produce_bench.py --build main=/tmp/main/src --build branch=src \\
        [--records 1000000] [--rounds 5] [--compression none --compression lz4]

Each ``--build NAME=DIR`` is a source tree put first on the broker's PYTHONPATH (e.g. ``git
archive main src | tar -x -C /tmp/main`` for the main branch). Every round starts a fresh
broker per build, in a rotated order, and produces ``--records`` 100-byte values with
``acks=1``, ``linger.ms=5`` into 8 partitions, once per ``--compression`` codec. The table
gives the median of the rounds and each build's ratio to the first build.
"""

from __future__ import annotations

import argparse
import statistics

from broker_bench import create_topic, measure, produce  # type: ignore[import-not-found]
from brokers import RunningBroker, start_strom  # type: ignore[import-not-found]


def run(broker: RunningBroker, topic: str, n: int, compression: str) -> tuple[float, float]:
    """(records/s, broker CPU seconds per million records) of one producer run."""
    create_topic(broker, topic)
    result = measure(broker, lambda: produce(broker, topic, n, "1",
                                             **{"compression.type": compression}))
    return result.records_per_s, result.cpu_s_per_million


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", action="append", required=True, metavar="NAME=DIR")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--compression", action="append")
    args = parser.parse_args()
    builds = [tuple(b.split("=", 1)) for b in args.build]
    codecs = args.compression or ["none"]
    runs: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for round_ in range(args.rounds):
        shift = round_ % len(builds)
        for name, source in builds[shift:] + builds[:shift]:
            broker = start_strom(name=name, source=source)
            try:
                for codec in codecs:
                    rate, cpu = run(broker, f"p-{codec}", args.records, codec)
                    runs.setdefault((name, codec), []).append((rate, cpu))
                    print(f"round {round_} {name} {codec}: {rate:,.0f} rec/s, "
                          f"{cpu:.2f} CPU s/M", flush=True)
            finally:
                broker.stop()
    first = builds[0][0]
    print("\n| build | compression | records/s (median) | vs " + first
          + " | broker CPU s per million (median) | vs " + first + " |")
    print("|---|---|---:|---:|---:|---:|")
    for codec in codecs:
        base_rate = statistics.median(r for r, _ in runs[(first, codec)])
        base_cpu = statistics.median(c for _, c in runs[(first, codec)])
        for name, _ in builds:
            rate = statistics.median(r for r, _ in runs[(name, codec)])
            cpu = statistics.median(c for _, c in runs[(name, codec)])
            print(f"| {name} | {codec} | {rate:,.0f} | {rate / base_rate:.2f} | {cpu:.2f} "
                  f"| {cpu / base_cpu:.2f} |")


if __name__ == "__main__":
    main()
