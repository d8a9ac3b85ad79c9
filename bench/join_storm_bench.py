"""Ten consumers joining one group one by one: classic eager vs classic cooperative vs the
KIP-848 consumer protocol, on strom and on Apache Kafka 4.4 in one run (issue 25).

    python bench/join_storm_bench.py [--members 10] [--every 1.0] [--partitions 20]
                                     [--rate 2000] [--settle 10] [--brokers strom,kafka]
                                     [--runs 1]

Per broker and protocol: a topic of ``--partitions`` partitions fed at ``--rate`` records/s;
a librdkafka consumer joins every ``--every`` seconds until ``--members`` are in. Measured
from the first member's ``subscribe()``:

- stable s: until every partition is owned by exactly one member, every member owns one,
  and the counts differ by at most one, measured after the last member joined;
- unowned partition·s: the integral of partitions no member owned, over that time (what
  the rebalances cost the application: eager rebalances revoke everything, cooperative and
  KIP-848 only what moves);
- records/s: records delivered from the first ``subscribe()`` until ``--settle`` seconds
  after the last member joined (or until stable, if later), against ``--rate`` fed.

Default client and broker settings (classic: ``heartbeat.interval.ms`` 3 s and the broker's
``group.initial.rebalance.delay.ms`` 3 s; KIP-848: the broker's 5 s heartbeat interval) on both
brokers. Kafka 4.4 is one KRaft node from ``KAFKA_LIB`` (``bench/kafka_ref.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from brokers import start_strom  # type: ignore[import-not-found]
from kafka_ref import start_kafka  # type: ignore[import-not-found]

PROTOCOLS = {
    "classic eager (range)": {"partition.assignment.strategy": "range"},
    "classic cooperative-sticky": {"partition.assignment.strategy": "cooperative-sticky"},
    "consumer (KIP-848)": {"group.protocol": "consumer"},
}


class Member(threading.Thread):
    def __init__(self, bootstrap: str, group: str, topic: str, extra: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "auto.offset.reset": "latest", **extra})
        self.topic = topic
        self.owned: frozenset[int] = frozenset()
        self.records = 0
        self.stop = threading.Event()

    def run(self) -> None:
        self.consumer.subscribe([self.topic])
        while not self.stop.is_set():
            msg = self.consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                self.records += 1
            self.owned = frozenset(tp.partition for tp in self.consumer.assignment())
        self.consumer.close()


def feed(bootstrap: str, topic: str, rate: float, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    sent, start = 0, time.perf_counter()
    while not stop.is_set():
        due = int((time.perf_counter() - start) * rate)
        for _ in range(due - sent):
            producer.produce(topic, b"x" * 100)
        sent = max(sent, due)
        producer.poll(0.005)
    producer.flush(10)


def one_run(bootstrap: str, protocol: dict[str, Any], args: argparse.Namespace
            ) -> tuple[float, float, float]:
    topic, group = f"storm-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, args.partitions, 1)]).values():
        future.result(30)
    time.sleep(1)
    stop = threading.Event()
    feeder = threading.Thread(target=feed, args=(bootstrap, topic, args.rate, stop),
                              daemon=True)
    feeder.start()
    members: list[Member] = []
    start = time.perf_counter()
    window = args.members * args.every + args.settle
    next_join, unowned, last = start, 0.0, start
    stable_at = float("nan")
    try:
        while time.perf_counter() - start < max(window, args.timeout if stable_at != stable_at
                                                else 0):
            now = time.perf_counter()
            if len(members) < args.members and now >= next_join:
                member = Member(bootstrap, group, topic, protocol)
                member.start()
                members.append(member)
                next_join += args.every
            owned = [m.owned for m in members]
            held = [p for o in owned for p in o]
            if stable_at != stable_at:
                unowned += (args.partitions - len(set(held))) * (now - last)
            last = now
            counts = [len(o) for o in owned]
            if (stable_at != stable_at and len(members) == args.members
                    and len(held) == len(set(held)) == args.partitions
                    and min(counts) >= 1 and max(counts) - min(counts) <= 1):
                stable_at = now - start
            if now - start >= window and stable_at == stable_at:
                break
            time.sleep(0.02)
        records = sum(m.records for m in members)
        elapsed = time.perf_counter() - start
    finally:
        for member in members:
            member.stop.set()
        for member in members:
            member.join(30)
        stop.set()
        feeder.join(30)
    return stable_at, unowned, records / elapsed


@contextlib.contextmanager
def broker(name: str, args: argparse.Namespace) -> Iterator[str]:
    if name == "kafka":
        # kafka_ref starts nodes with no initial rebalance delay; Kafka's default here, as
        # strom's
        with start_kafka(args.kafka_lib,
                         {"group.initial.rebalance.delay.ms": "3000"}) as kafka:
            yield kafka.bootstrap
    else:
        strom = start_strom()
        try:
            yield strom.bootstrap
        finally:
            strom.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--every", type=float, default=1.0)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--rate", type=float, default=2000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--settle", type=float, default=10.0)
    parser.add_argument("--brokers", default="strom,kafka")
    parser.add_argument("--kafka-lib", default="/work/kafka-ref/lib")
    args = parser.parse_args()
    rows: list[tuple[str, str, float, float, float]] = []
    for name in args.brokers.split(","):
        with broker(name, args) as bootstrap:
            for label, protocol in PROTOCOLS.items():
                runs = [one_run(bootstrap, protocol, args) for _ in range(args.runs)]
                stable = statistics.median(r[0] for r in runs)
                gap = statistics.median(r[1] for r in runs)
                rate = statistics.median(r[2] for r in runs)
                rows.append((name, label, stable, gap, rate))
                print(f"{name:6} {label:28} stable {stable:6.1f} s  unowned "
                      f"{gap:7.1f} partition·s  {rate:7.0f} records/s", flush=True)
    print("\n| broker | protocol | stable, s | unowned partition·s | records/s |")
    print("|---|---|---|---|---|")
    for name, label, stable, gap, rate in rows:
        print(f"| {name} | {label} | {stable:.1f} | {gap:.1f} | {rate:.0f} |")


if __name__ == "__main__":
    main()
