"""Transactional produce against plain idempotent produce, on the same broker in the same run.

    python bench/txn_bench.py [--records 200000] [--out FILE]

confluent-kafka (librdkafka) producers, 100-byte values, 8 partitions, ``linger.ms=5``. Each
row sends ``--records`` records: idempotent (``enable.idempotence``), then transactional with
1, 10, 100 and 1,000 records per transaction (begin, produce, commit; the commit waits for
its records and the coordinator's PrepareCommit). Ratios are against the idempotent row.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from confluent_kafka import Producer

from broker_bench import PARTITIONS, VALUE, create_topic, produce  # type: ignore[import-not-found]
from brokers import RunningBroker, start_strom  # type: ignore[import-not-found]


def idempotent(broker: RunningBroker, topic: str, n: int) -> float:
    start = time.perf_counter()
    produce(broker, topic, n, "all", **{"enable.idempotence": True})
    return n / (time.perf_counter() - start)


def transactional(broker: RunningBroker, topic: str, n: int, per_txn: int) -> float:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                         "transactional.id": f"bench-{per_txn}-{time.time_ns()}",
                         "queue.buffering.max.messages": 1_000_000})
    producer.init_transactions(60)
    start = time.perf_counter()
    sent = 0
    while sent < n:
        producer.begin_transaction()
        for _ in range(min(per_txn, n - sent)):
            producer.produce(topic, VALUE, partition=sent % PARTITIONS)
            sent += 1
        producer.commit_transaction(60)
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--out")
    args = parser.parse_args()
    broker = start_strom()
    rows: list[tuple[str, float]] = []
    try:
        create_topic(broker, "idem")
        rows.append(("idempotent", idempotent(broker, "idem", args.records)))
        for per_txn in (1, 10, 100, 1000):
            topic = f"txn{per_txn}"
            create_topic(broker, topic)
            # Small transactions are slow: send fewer records so the row takes seconds.
            count = min(args.records, per_txn * 2000)
            rows.append((f"transactional, {per_txn} per transaction",
                         transactional(broker, topic, count, per_txn)))
    finally:
        broker.stop()
    base = rows[0][1]
    lines = ["| producer | records/s | / idempotent |", "|---|---|---|"]
    lines += [f"| {name} | {rate:,.0f} | {rate / base:.3f} |" for name, rate in rows]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
