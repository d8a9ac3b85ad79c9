"""Trace librdkafka consuming a backlog: its queue depth, the application's progress, CPU.

    python bench/consume_trace.py [--broker strom|tansu] [--records 2000000] [--repeats 3]
                                  [--row queued-min-1M|defaults|backoff-10ms] [--timeline]

One broker, one topic of ``--records`` 100-byte records in 8 partitions (filled as
``broker_bench.py`` fills it), then ``--repeats`` consumes with the client settings of
``broker_bench.py``'s row. Every 50 ms librdkafka's own statistics give the consumer queue
(``fetchq_cnt`` / ``fetchq_size``: every partition forwards to the one consumer queue, so each
reports the same queue) and the loop's count of records consumed. It prints per run:

- records/s, and how long the queue sat empty while records were still to come and none
  reached the application (the client's ``fetch.queue.backoff.ms`` stalls, or waits on the
  broker);
- the application's drain rate and the broker's delivery rate (records into the queue) from
  the first record queued until the queue peaked (its limit, when the run stalls);
- CPU seconds of the application thread, of librdkafka's fetch thread for the broker
  (``rdk:broker<id>``: the system part, mostly page faults on the memory a growing queue
  takes, and its minor faults) and of the broker process.

``--timeline`` adds the 50 ms samples. This is how docs/benchmarks.md's traces of the
``queued.min.messages=1M`` row (2026-12-01) were taken.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from broker_bench import CONSUMERS, PARTITIONS, ROWS, create_topic, produce  # type: ignore[import-not-found]
from brokers import RunningBroker, start_strom, start_tansu  # type: ignore[import-not-found]

CLK_TCK = os.sysconf("SC_CLK_TCK")
SAMPLE_MS = 50
#: An empty queue for this long with records still to come counts as a stall, seconds.
STALL = 0.25


def thread_cpu() -> dict[str, tuple[float, float, int]]:
    """(user s, system s, minor faults) of each thread of this process, keyed ``name:tid``."""
    out: dict[str, tuple[float, float, int]] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:  # the thread ended meanwhile
            continue
        out[f"{name}:{tid}"] = (int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK,
                                int(fields[7]))
    return out


@dataclass
class Trace:
    elapsed: float
    samples: list[tuple[float, int, int, int]] = field(default_factory=list)
    """(seconds since the first consume, queued records, queued value bytes, consumed)"""
    app_cpu: float = 0.0
    fetch_cpu: float = 0.0
    fetch_system: float = 0.0
    fetch_faults: int = 0
    broker_cpu: float = 0.0

    def stalled(self, total: int) -> float:
        """Seconds the queue was empty while records were still to come and none arrived,
        in spells of at least :data:`STALL`, after the first record."""
        spells, start = 0.0, None
        for t, queued, _, consumed in self.samples:
            empty = queued == 0 and 0 < consumed < total
            if empty and start is None:
                start = t
            elif not empty and start is not None:
                spells += t - start if t - start >= STALL else 0.0
                start = None
        return spells

    def rates(self) -> tuple[float, float]:
        """(application drain, broker delivery) in records/s from the first sample with
        records queued to the sample where the queue held the most bytes."""
        queued = [s for s in self.samples if s[1] > 0]
        if not queued:
            return float("nan"), float("nan")
        first, peak = queued[0], max(queued, key=lambda s: s[2])
        span = peak[0] - first[0]
        if span <= 0:
            return float("nan"), float("nan")
        drained = peak[3] - first[3]
        return drained / span, (drained + peak[1] - first[1]) / span


def consume(broker: RunningBroker, n: int, settings: dict[str, object]) -> Trace:
    samples: list[tuple[float, int, int, int]] = []
    count = 0
    t0 = time.perf_counter()

    def on_stats(text: str) -> None:
        queued = size = 0
        for topic in json.loads(text).get("topics", {}).values():
            for p in topic["partitions"].values():
                if int(p["partition"]) >= 0:  # -1 is the unassigned-partition entry
                    queued = max(queued, p["fetchq_cnt"])
                    size = max(size, p["fetchq_size"])
        samples.append((time.perf_counter() - t0, queued, size, count))

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "trace",
                         "enable.auto.commit": False, "statistics.interval.ms": SAMPLE_MS,
                         "stats_cb": on_stats, **settings})
    consumer.assign([TopicPartition("b1", p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    cpu0, broker0 = thread_cpu(), broker.cpu_seconds()
    t0 = time.perf_counter()
    while count < n:
        for msg in consumer.consume(10000, 1.0):
            if msg.error() is None:
                count += 1
            elif msg.error().code() != KafkaError._PARTITION_EOF:
                raise RuntimeError(msg.error())
    trace = Trace(time.perf_counter() - t0, samples)
    cpu1 = thread_cpu()
    trace.broker_cpu = broker.cpu_seconds() - broker0
    for key, (user, system, faults) in cpu1.items():
        user0, system0, faults0 = cpu0.get(key, (0.0, 0.0, 0))
        used = user - user0 + system - system0
        if key.startswith("rdk:broker") and not key.startswith("rdk:broker-1"):
            # The broker's fetch thread (started once metadata names it), not the bootstrap's.
            trace.fetch_cpu += used
            trace.fetch_system += system - system0
            trace.fetch_faults += faults - faults0
        elif key.split(":", 1)[0] in ("python", "python3"):
            trace.app_cpu += used
    consumer.close()
    return trace


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--broker", choices=("strom", "tansu"), default="strom")
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--row", choices=sorted(ROWS), default="queued-min-1M")
    parser.add_argument("--timeline", action="store_true", help="print the 50 ms samples")
    args = parser.parse_args()
    broker = start_tansu() if args.broker == "tansu" else start_strom()
    try:
        create_topic(broker, "b1")
        produce(broker, "b1", args.records, "1")
        rates = []
        for run in range(args.repeats):
            trace = consume(broker, args.records, CONSUMERS[ROWS[args.row]])
            rate = args.records / trace.elapsed
            rates.append(rate)
            drain, delivery = trace.rates()
            peak = max((s[2] for s in trace.samples), default=0)
            print(f"{args.broker} run {run + 1}: {rate:,.0f} records/s; stalled "
                  f"{trace.stalled(args.records):.2f} s; until the queue peaked: drain "
                  f"{drain:,.0f}/s, delivery {delivery:,.0f}/s; peak queue {peak / 1e6:.1f} MB; "
                  f"CPU s: app {trace.app_cpu:.2f}, fetch thread {trace.fetch_cpu:.2f} (system "
                  f"{trace.fetch_system:.2f}, {trace.fetch_faults:,} faults), broker "
                  f"{trace.broker_cpu:.2f}")
            if args.timeline:
                for t, queued, size, consumed in trace.samples:
                    print(f"  {t:6.2f} s  queue {queued:8,} records {size / 1e6:6.1f} MB  "
                          f"consumed {consumed:,}")
        print(f"{args.broker}: median {statistics.median(rates):,.0f} records/s "
              f"({args.row}, {args.records:,} records)")
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
