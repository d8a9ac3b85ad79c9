"""strom vs Tansu with the same librdkafka client: throughput, CPU per record, latency, memory.

    python bench/broker_bench.py [--records 1000000] [--big-records 5000000] [--repeats 3]
                                 [--only ROW] [--also-source DIR] [--out FILE]

Every figure is measured for both brokers in the same run; the table reports strom / Tansu
ratios so a noisy shared machine affects both sides alike. Clients run in this process.
``--only ROW`` (a key of ``ROWS``: ``backoff-10ms``, ``queued-min-1M``, ``defaults``) measures
that consume row alone (after the produce that fills its topic), without the durable broker,
acks=all and latency: long steady-state runs. Its brokers all run at once and take turns, one
consume each per round (the order rotating every round), so a change in the machine's load
falls on every broker alike; the table adds the median of the per-round ratios. ``--also-source
DIR`` adds a strom run from another source tree (e.g. ``/path/to/main/src``) to the same table:
a paired before/after.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from brokers import RunningBroker, start_strom, start_tansu  # type: ignore[import-not-found]

PARTITIONS = 8
VALUE = b"x" * 100


def create_topic(broker: RunningBroker, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(name, PARTITIONS, 1)]).values():
        f.result(30)
    time.sleep(0.5)


@dataclass
class Result:
    records_per_s: float
    cpu_s_per_million: float


def measure(broker: RunningBroker, work: Callable[[], int]) -> Result:
    cpu0 = broker.cpu_seconds()
    t0 = time.perf_counter()
    count = work()
    elapsed = time.perf_counter() - t0
    cpu = broker.cpu_seconds() - cpu0
    return Result(count / elapsed, cpu / count * 1e6)


def produce(broker: RunningBroker, topic: str, n: int, acks: str, **config: object) -> int:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": acks,
                         "linger.ms": 5, "queue.buffering.max.messages": 1_000_000, **config})
    for i in range(n):
        while True:
            try:
                producer.produce(topic, VALUE, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10000 == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    if remaining:
        raise RuntimeError(f"{remaining} records not delivered")
    return n


# librdkafka >= 2.4 pauses fetching for fetch.queue.backoff.ms (default 1000 ms) whenever its
# local queue holds more than queued.min.messages (100k, summed over assigned partitions) or
# queued.max.messages.kbytes (64 MiB): a broker that answers faster than the application
# drains is then idle most of each second (strom paces such clients: broker/fetch_pacing.py).
# Rows: a 10 ms backoff (the client never idles long), queued.min.messages=1M (the byte limit
# applies instead), and the client's defaults. Each is the median of --repeats runs.
CONSUMERS: dict[str, dict[str, object]] = {
    "consume rec/s": {"fetch.queue.backoff.ms": 10},
    "consume rec/s, queued.min.messages=1M": {"queued.min.messages": 1_000_000},
    "consume rec/s, client defaults": {},
}
#: Short names of the consume rows, for ``--only``.
ROWS = dict(zip(("backoff-10ms", "queued-min-1M", "defaults"), CONSUMERS, strict=True))


def consume(broker: RunningBroker, topic: str, n: int, **config: object) -> int:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench",
                         "enable.auto.commit": False, **config})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    count = 0
    deadline = time.monotonic() + 300
    while count < n and time.monotonic() < deadline:
        for msg in consumer.consume(10000, 1.0):
            if msg.error() is None:
                count += 1
            elif msg.error().code() != KafkaError._PARTITION_EOF:
                raise RuntimeError(msg.error())
    consumer.close()
    return count


def latency(broker: RunningBroker, topic: str, rate: int = 2000, seconds: float = 10.0
            ) -> tuple[float, float]:
    """p50 / p99 end-to-end ms at ``rate`` records/s with default client settings."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lat"})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    samples: list[float] = []
    done = threading.Event()

    def consume_loop() -> None:
        while not done.is_set():
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                sent = float(msg.value().split(b" ")[0])
                samples.append((time.time() - sent) * 1000)

    thread = threading.Thread(target=consume_loop)
    thread.start()
    time.sleep(2.0)  # let the consumer join its partitions first
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    start = time.perf_counter()
    total = int(rate * seconds)
    for i in range(total):
        target = start + i / rate
        now = time.perf_counter()
        if target > now:
            time.sleep(target - now)
        producer.produce(topic, f"{time.time():.6f} ".encode().ljust(100, b"x"))
        producer.poll(0)
    producer.flush(30)
    time.sleep(1.0)
    done.set()
    thread.join()
    consumer.close()
    samples.sort()
    if not samples:
        return float("nan"), float("nan")
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


def bench_broker(broker: RunningBroker, records: int, repeats: int = 1) -> dict[str, float]:
    out: dict[str, float] = {}
    create_topic(broker, "b1")
    r = measure(broker, lambda: produce(broker, "b1", records, "1"))
    out["produce acks=1 rec/s"], out["produce CPU s/M"] = r.records_per_s, r.cpu_s_per_million
    create_topic(broker, "ball")
    r = measure(broker, lambda: produce(broker, "ball", records, "all"))
    out["produce acks=all rec/s"] = r.records_per_s
    for row, config in CONSUMERS.items():
        runs = [measure(broker, lambda c=config: consume(broker, "b1", records, **c))
                for _ in range(repeats)]
        out[row] = statistics.median(r.records_per_s for r in runs)
        if row == "consume rec/s":
            out["consume CPU s/M"] = statistics.median(r.cpu_s_per_million for r in runs)
    create_topic(broker, "lat")
    out["latency p50 ms"], out["latency p99 ms"] = latency(broker, "lat")
    return out


def bench_interleaved(starts: list[Callable[[], RunningBroker]], records: int, repeats: int,
                      row: str) -> dict[str, dict[str, float]]:
    """``row`` on every broker at once: each fills its topic, then ``repeats`` rounds of one
    consume per broker, the order rotated each round. The first broker started is the peer
    the per-round ratios are taken to."""
    brokers: list[RunningBroker] = []
    try:
        for start in starts:
            brokers.append(start())
        out: dict[str, dict[str, float]] = {}
        for broker in brokers:
            create_topic(broker, "b1")
            r = measure(broker, lambda b=broker: produce(b, "b1", records, "1"))
            out[broker.name] = {"produce acks=1 rec/s": r.records_per_s,
                                "produce CPU s/M": r.cpu_s_per_million}
        runs: dict[str, list[float]] = {broker.name: [] for broker in brokers}
        for i in range(repeats):
            turn = i % len(brokers)
            for broker in brokers[turn:] + brokers[:turn]:
                result = measure(broker, lambda b=broker: consume(b, "b1", records,
                                                                   **CONSUMERS[row]))
                runs[broker.name].append(result.records_per_s)
        peer = runs[brokers[0].name]
        for name, values in runs.items():
            out[name][row] = statistics.median(values)
            out[name][row + ", runs"] = len(values)
            out[name][row + ", min"] = min(values)
            out[name][row + ", max"] = max(values)
            out[name][row + ", median of per-round ratios to " + brokers[0].name] = (
                statistics.median(v / p for v, p in zip(values, peer, strict=True)))
            print(f"{name}: {row}: " + ", ".join(f"{v:,.0f}" for v in values))
        return out
    finally:
        for broker in brokers:
            broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--big-records", type=int, default=5_000_000)
    parser.add_argument("--repeats", type=int, default=3, help="runs per consume row (median)")
    parser.add_argument("--only", choices=sorted(ROWS), help="measure this consume row alone")
    parser.add_argument("--also-source", metavar="DIR",
                        help="also run strom from this source tree (a before/after pair)")
    parser.add_argument("--out")
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    starts: list[Callable[[], RunningBroker]] = [start_tansu, start_strom]
    if args.only is None:
        starts.append(lambda: start_strom({"log.flush.interval.messages": "1"}, "strom durable"))
    if args.also_source:
        starts.append(lambda: start_strom(name="strom @" + args.also_source,
                                          source=args.also_source))
    if args.only is not None:
        results = bench_interleaved(starts, args.records, args.repeats, ROWS[args.only])
        starts = []
    for start in starts:
        broker = start()
        try:
            results[broker.name] = bench_broker(broker, args.records, args.repeats)
            if broker.name == "strom" and args.big_records:
                create_topic(broker, "big")
                produce(broker, "big", args.big_records, "1")
                results[broker.name]["RSS MB after big"] = broker.rss_mb()
        finally:
            broker.stop()
    others = [name for name in results if name not in ("strom", "tansu")]
    lines = ["| metric | strom | " + "".join(f"{name} | " for name in others)
             + "tansu | strom / tansu | " + "".join(f"{name} / tansu | " for name in others),
             "|---" * (4 + 2 * len(others)) + "|"]
    for metric in results["strom"]:
        t = results["tansu"].get(metric, float("nan"))
        values = [results[name].get(metric, float("nan")) for name in ["strom", *others]]
        ratios = [v / t if t else float("nan") for v in values]
        lines.append(f"| {metric} | {values[0]:,.2f} | "
                     + "".join(f"{v:,.2f} | " for v in values[1:]) + f"{t:,.2f} | "
                     + "".join(f"{r:.2f} | " for r in ratios))
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
