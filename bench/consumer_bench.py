"""Python consumers against one strom broker in one run: records/s and group rebalance time.

    python bench/consumer_bench.py [--records 1000000] [--repeats 3] [--out FILE]

- consume: records/s reading ``--records`` pre-produced 100-byte records from 8 partitions,
  timed from the first poll until the last record (the broker runs with
  ``group.initial.rebalance.delay.ms=0`` so a new group's join is not a fixed 3 s wait),
  with ``strom.client.Consumer`` (``assign`` of every partition, and ``subscribe`` in a new
  group), aiokafka, kafka-python and
  confluent-kafka (librdkafka, for context). Each run is a fresh process (so no client warms
  another's caches or shares its GIL); the clients take turns within each repeat.
- rebalance: a group of 4 consumers (4 tasks on one event loop, roundrobin, heartbeat every
  1 s, each polling an empty 8-partition topic) owns the 8 partitions; one ``close()``s
  (LeaveGroup) and the time until the other three own all 8 is measured —
  ``strom.client.Consumer`` vs aiokafka.

The table gives medians and ratios to aiokafka, so a noisy shared machine affects both alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from broker_bench import PARTITIONS, create_topic, produce  # type: ignore[import-not-found]
from brokers import start_strom  # type: ignore[import-not-found]

CLIENTS = ("strom assign", "strom subscribe", "aiokafka", "kafka-python", "confluent-kafka")
GROUP_SIZE = 4
HEARTBEAT_MS = 1000
SESSION_MS = 10000


# -- one consume run (in a child process) ----------------------------------------------------
class Clock:
    """Counts records from the first poll on (the client is started and assigned or
    subscribed by then; fetching, offset lookups and a group's join are inside)."""

    def __init__(self) -> None:
        self.seen = 0
        self.start = time.perf_counter()

    def got(self, count: int) -> None:
        self.seen += count

    def rate(self) -> float:
        """Records/s since the clock started."""
        return self.seen / (time.perf_counter() - self.start)


async def consume_strom(bootstrap: str, topic: str, n: int, subscribe: bool) -> float:
    from strom.client import Consumer
    from strom.common.types import TopicPartition

    group = f"bench-{uuid.uuid4().hex}" if subscribe else None
    async with Consumer(bootstrap, group_id=group, auto_offset_reset="earliest") as consumer:
        if subscribe:
            consumer.subscribe([topic])
        else:
            consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        clock = Clock()
        while clock.seen < n:
            clock.got(len(await consumer.poll(1.0)))
        return clock.rate()


async def consume_aiokafka(bootstrap: str, topic: str, n: int) -> float:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        clock = Clock()
        while clock.seen < n:
            batches = await consumer.getmany(timeout_ms=1000)
            clock.got(sum(len(records) for records in batches.values()))
        return clock.rate()
    finally:
        await consumer.stop()


def consume_kafka_python(bootstrap: str, topic: str, n: int) -> float:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    clock = Clock()
    while clock.seen < n:
        clock.got(sum(len(records) for records in consumer.poll(timeout_ms=1000).values()))
    consumer.close()
    return clock.rate()


def consume_confluent(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-unused",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    clock = Clock()
    while clock.seen < n:
        clock.got(sum(1 for m in consumer.consume(10000, 1.0) if m.error() is None))
    consumer.close()
    return clock.rate()


def consume_once(client: str, bootstrap: str, topic: str, n: int) -> float:
    """Records/s of ``client`` reading ``n`` records (run in this process)."""
    if client.startswith("strom"):
        return asyncio.run(consume_strom(bootstrap, topic, n,
                                         subscribe=client == "strom subscribe"))
    if client == "aiokafka":
        return asyncio.run(consume_aiokafka(bootstrap, topic, n))
    if client == "kafka-python":
        return consume_kafka_python(bootstrap, topic, n)
    return consume_confluent(bootstrap, topic, n)


def consume_in_child(client: str, bootstrap: str, topic: str, n: int) -> float:
    out = subprocess.run([sys.executable, __file__, "--child", client, bootstrap, topic, str(n)],
                         check=True, capture_output=True, text=True, cwd=Path(__file__).parent)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["rate"])


# -- rebalance after one member leaves ---------------------------------------------------------
async def group_takeover(members: list[Any], assignment: Callable[[Any], set[int]],
                         poll: Callable[[Any], Awaitable[Any]],
                         close: Callable[[Any], Awaitable[Any]]) -> float:
    """Seconds from one member's close() until the three others own all partitions.

    Every member is polled by a task of its own, as an application would."""
    stopping: set[int] = set()

    async def loop(i: int, member: Any) -> None:
        while i not in stopping:
            await poll(member)

    tasks = [asyncio.create_task(loop(i, m)) for i, m in enumerate(members)]

    def owned(group: list[Any]) -> list[set[int]]:
        return [assignment(m) for m in group]

    def complete(group: list[Any]) -> bool:
        sets = owned(group)
        return all(sets) and sum(map(len, sets)) == PARTITIONS == len(set().union(*sets))

    try:
        deadline = time.perf_counter() + 120
        while not complete(members):
            assert time.perf_counter() < deadline, owned(members)
            await asyncio.sleep(0.01)
        stopping.add(0)
        await tasks[0]
        start = time.perf_counter()
        await close(members[0])
        while not complete(members[1:]):
            assert time.perf_counter() - start < 120, owned(members[1:])
            await asyncio.sleep(0.005)
        return time.perf_counter() - start
    finally:
        stopping.update(range(len(members)))
        await asyncio.gather(*tasks[1:])
        for m in members[1:]:
            await close(m)


async def strom_rebalance(bootstrap: str, topic: str) -> float:
    from strom.client import Consumer

    group = f"bench-{uuid.uuid4().hex}"
    members = [await Consumer(bootstrap, group_id=group, auto_offset_reset="earliest",
                              partition_assignment_strategy="roundrobin",
                              session_timeout_ms=SESSION_MS,
                              heartbeat_interval_ms=HEARTBEAT_MS).start()
               for _ in range(GROUP_SIZE)]
    for m in members:
        m.subscribe([topic])
    return await group_takeover(members, lambda m: {tp.partition for tp in m.assignment()},
                                lambda m: m.poll(0.05), lambda m: m.close())


async def aiokafka_rebalance(bootstrap: str, topic: str) -> float:
    from aiokafka import AIOKafkaConsumer

    group = f"bench-{uuid.uuid4().hex}"
    members = []
    for _ in range(GROUP_SIZE):
        m = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             auto_offset_reset="earliest", session_timeout_ms=SESSION_MS,
                             heartbeat_interval_ms=HEARTBEAT_MS)
        await m.start()
        members.append(m)
    return await group_takeover(members, lambda m: {tp.partition for tp in m.assignment()},
                                lambda m: m.getmany(timeout_ms=50), lambda m: m.stop())


# -- the run ---------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--rebalance-only", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()
    clients = [] if args.rebalance_only else args.clients.split(",")
    broker = start_strom({"group.initial.rebalance.delay.ms": "0"})
    try:
        topic = "consume-bench"
        if clients:
            create_topic(broker, topic)
            produce(broker, topic, args.records, "1")
        rates: dict[str, list[float]] = {c: [] for c in clients}
        for _ in range(args.repeats):
            for client in clients:
                rates[client].append(consume_in_child(client, broker.bootstrap, topic,
                                                      args.records))
                print(client, f"{rates[client][-1]:,.0f} records/s", file=sys.stderr)
        idle = "rebalance-bench"  # empty: members wait in fetches, as idle consumers do
        create_topic(broker, idle)
        takeovers: dict[str, list[float]] = {"strom.client": [], "aiokafka": []}
        for _ in range(args.repeats):
            takeovers["strom.client"].append(asyncio.run(strom_rebalance(broker.bootstrap,
                                                                         idle)))
            takeovers["aiokafka"].append(asyncio.run(aiokafka_rebalance(broker.bootstrap,
                                                                       idle)))
            print("takeover", {k: f"{v[-1]:.3f}" for k, v in takeovers.items()},
                  file=sys.stderr)
    finally:
        broker.stop()
    rate = {c: statistics.median(r) for c, r in rates.items()}
    lines = [f"{args.records:,} records of 100 bytes, {PARTITIONS} partitions, "
             f"{args.repeats} repeats (median)", "",
             "| client | records/s | vs aiokafka | vs kafka-python | runs (records/s) |",
             "|---|---:|---:|---:|---|"]
    for client in clients:
        def ratio(other: str, client: str = client) -> str:
            return f"{rate[client] / rate[other]:.2f}x" if other in rate else "-"

        runs = ", ".join(f"{r:,.0f}" for r in rates[client])
        lines.append(f"| {client} | {rate[client]:,.0f} | {ratio('aiokafka')} | "
                     f"{ratio('kafka-python')} | {runs} |")
    lines += ["", f"Group of {GROUP_SIZE}, one closes, the others own all {PARTITIONS} "
              f"partitions (heartbeat {HEARTBEAT_MS} ms):", "",
              "| client | takeover (median) | runs (s) |", "|---|---:|---|"]
    for client, runs_s in takeovers.items():
        lines.append(f"| {client} | {statistics.median(runs_s):.3f} s | "
                     f"{', '.join(f'{s:.3f}' for s in runs_s)} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _, _, name, address, topic_name, count = sys.argv
        print(json.dumps({"rate": consume_once(name, address, topic_name, int(count))}))
    else:
        main()
