"""Consumer-group timings with default librdkafka settings, strom vs Tansu in one run.

    python bench/groups_bench.py [--commits 20000] [--out FILE]

- first records: time from a new group's first ``subscribe()`` until the first record arrives
  (the topic already holds records; ``auto.offset.reset=earliest``);
- takeover: time from one member's ``close()`` (LeaveGroup) until the remaining member has
  been assigned all partitions;
- commits/s: synchronous offset commits per second from one consumer (one coordinator).
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from brokers import RunningBroker, start_strom, start_tansu  # type: ignore[import-not-found]

PARTITIONS = 8


def prepare(broker: RunningBroker, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(1000):
        producer.produce(topic, b"x" * 100, partition=i % PARTITIONS)
    producer.flush(30)


def first_records(broker: RunningBroker, topic: str) -> float:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest"})
    start = time.perf_counter()
    consumer.subscribe([topic])
    try:
        while time.perf_counter() - start < 120:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                return time.perf_counter() - start
        return float("nan")
    finally:
        consumer.close()


def takeover(broker: RunningBroker, topic: str) -> float:
    group = uuid.uuid4().hex
    assigned: dict[str, set[int]] = {"a": set(), "b": set()}
    changed = threading.Event()

    def make(name: str) -> Consumer:
        def on_assign(c: Consumer, parts: list[TopicPartition]) -> None:
            assigned[name] = {p.partition for p in parts}
            changed.set()

        def on_revoke(c: Consumer, parts: list[TopicPartition]) -> None:
            assigned[name] = set()

        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                      "auto.offset.reset": "earliest"})
        c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        return c

    a, b = make("a"), make("b")
    deadline = time.perf_counter() + 120
    while time.perf_counter() < deadline and not (
        assigned["a"] and assigned["b"] and len(assigned["a"] | assigned["b"]) == PARTITIONS
    ):
        a.poll(0.05)
        b.poll(0.05)
    start = time.perf_counter()
    b.close()
    while time.perf_counter() - start < 120 and len(assigned["a"]) < PARTITIONS:
        a.poll(0.05)
    elapsed = time.perf_counter() - start
    took_all = len(assigned["a"]) == PARTITIONS
    a.close()  # revokes, so the check above comes first
    return elapsed if took_all else float("nan")


def commits_per_second(broker: RunningBroker, topic: str, n: int) -> float:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uuid.uuid4().hex,
                         "enable.auto.commit": False})
    parts = [TopicPartition(topic, p, 0) for p in range(PARTITIONS)]
    consumer.assign(parts)
    start = time.perf_counter()
    for i in range(n):
        consumer.commit(offsets=[TopicPartition(topic, i % PARTITIONS, i)], asynchronous=False)
    elapsed = time.perf_counter() - start
    consumer.close()
    return n / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=5000)
    parser.add_argument("--out")
    args = parser.parse_args()
    rows: dict[str, dict[str, float]] = {}
    for start in (start_strom, start_tansu):
        broker = start()
        try:
            prepare(broker, "g")
            rows[broker.name] = {
                "first records after subscribe, s": first_records(broker, "g"),
                "partitions taken over after LeaveGroup, s": takeover(broker, "g"),
                "synchronous offset commits/s": commits_per_second(broker, "g", args.commits),
            }
        finally:
            broker.stop()
    lines = ["| metric | strom | tansu |", "|---|---|---|"]
    for metric in rows["strom"]:
        lines.append(f"| {metric} | {rows['strom'][metric]:,.2f} | {rows['tansu'][metric]:,.2f} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
