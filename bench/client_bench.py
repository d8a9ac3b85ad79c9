"""Python clients against the same strom broker in the same run: producer records/s.

    python bench/client_bench.py --records 300000 --repeats 3

Each client produces ``--records`` 100-byte values (no key, acks=1, linger.ms=5, no
compression, the client's default batch size) to a fresh topic of 4 partitions, in a process
of its own, timed from its first send until everything is acknowledged (flush). Clients run
interleaved, once per round, so a noisy neighbour hits them alike; the table shows each
client's median and its ratio to aiokafka and to kafka-python. The clients:

- ``strom`` — ``strom.client.Producer`` (asyncio): ``await producer.send(...)`` per record;
- ``strom-sync`` — ``strom.client.SyncProducer``: ``producer.send(...)`` per record;
- ``aiokafka`` — ``AIOKafkaProducer``: ``await producer.send(...)`` per record;
- ``kafka-python`` — ``KafkaProducer``: ``producer.send(...)`` per record;
- ``confluent-kafka`` (librdkafka, C; for context) — ``produce()`` + ``poll(0)``.

The broker is started from the installed strom (or ``--source DIR``); the clients import
strom from ``PYTHONPATH``. Targets (issue 10): strom ≥ aiokafka, strom ≥ 2 x kafka-python.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from brokers import start_strom

VALUE = b"v" * 100
PARTITIONS = 4
CLIENTS = ("strom", "strom-sync", "aiokafka", "kafka-python", "confluent-kafka")


# -- one client, in its own process ---------------------------------------------------------
async def _time_async(send: Callable[..., Any], flush: Callable[[], Any], topic: str,
                      records: int) -> float:
    """Seconds to ``await send(topic, VALUE)`` ``records`` times, then ``await flush()``."""
    started = time.perf_counter()
    for _ in range(records):
        await send(topic, VALUE)
    await flush()
    return time.perf_counter() - started


def _time_sync(send: Callable[..., Any], flush: Callable[[], Any], topic: str,
               records: int) -> float:
    """Seconds to ``send(topic, VALUE)`` ``records`` times, then ``flush()``."""
    started = time.perf_counter()
    for _ in range(records):
        send(topic, VALUE)
    flush()
    return time.perf_counter() - started


async def _strom(bootstrap: str, topic: str, records: int) -> float:
    from strom.client import Producer

    async with Producer(bootstrap, acks=1, linger_ms=5) as producer:
        await producer.partition_count(topic)
        return await _time_async(producer.send, producer.flush, topic, records)


def _strom_sync(bootstrap: str, topic: str, records: int) -> float:
    from strom.client import SyncProducer

    with SyncProducer(bootstrap, acks=1, linger_ms=5) as producer:
        producer.partition_count(topic)
        return _time_sync(producer.send, producer.flush, topic, records)


async def _aiokafka(bootstrap: str, topic: str, records: int) -> float:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5)
    await producer.start()
    try:
        await producer.partitions_for(topic)
        return await _time_async(producer.send, producer.flush, topic, records)
    finally:
        await producer.stop()


def _kafka_python(bootstrap: str, topic: str, records: int) -> float:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5)
    try:
        producer.partitions_for(topic)
        return _time_sync(producer.send, producer.flush, topic, records)
    finally:
        producer.close()


def _confluent(bootstrap: str, topic: str, records: int) -> float:
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": 1,
                                         "linger.ms": 5})
    producer.list_topics(topic, timeout=10)
    started = time.perf_counter()
    produce, poll = producer.produce, producer.poll
    for _ in range(records):
        while True:
            try:
                produce(topic, VALUE)
                break
            except BufferError:
                poll(0.001)
        poll(0)
    producer.flush(60)
    return time.perf_counter() - started


_WORKERS: dict[str, Callable[[str, str, int], float]] = {
    "strom": lambda b, t, n: asyncio.run(_strom(b, t, n)),
    "strom-sync": _strom_sync,
    "aiokafka": lambda b, t, n: asyncio.run(_aiokafka(b, t, n)),
    "kafka-python": _kafka_python,
    "confluent-kafka": _confluent,
}


def worker(client: str, bootstrap: str, topic: str, records: int) -> None:
    seconds = _WORKERS[client](bootstrap, topic, records)
    print(json.dumps({"records_per_s": records / seconds}))


# -- the run --------------------------------------------------------------------------------
def create_topic(bootstrap: str) -> str:
    from strom.client import SyncAdminClient

    name = f"client-bench-{uuid.uuid4().hex[:8]}"
    with SyncAdminClient(bootstrap) as admin:
        admin.create_topic(name, PARTITIONS, 1)
    return name


def run_client(client: str, bootstrap: str, records: int) -> float:
    topic = create_topic(bootstrap)
    out = subprocess.run([sys.executable, __file__, "--worker", client, "--bootstrap",
                          bootstrap, "--topic", topic, "--records", str(records)],
                         capture_output=True, text=True, timeout=900, check=True)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["records_per_s"])


def table(results: dict[str, list[float]]) -> str:
    median = {client: statistics.median(rates) for client, rates in results.items()}
    lines = ["| client | records/s (median) | runs | ÷ aiokafka | ÷ kafka-python |",
             "|---|---:|---|---:|---:|"]
    for client, rates in results.items():
        runs = ", ".join(f"{r / 1000:.0f}k" for r in rates)
        ratios = [f"{median[client] / median[peer]:.2f}" if peer in median else "-"
                  for peer in ("aiokafka", "kafka-python")]
        lines.append(f"| {client} | {median[client]:,.0f} | {runs} | {' | '.join(ratios)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--source", help="a strom source tree to run the broker from")
    parser.add_argument("--out", help="also write the table to this file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.bootstrap, args.topic, args.records)
        return
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    broker = start_strom(source=args.source)
    results: dict[str, list[float]] = {client: [] for client in clients}
    try:
        for round_no in range(args.repeats):
            for client in clients:
                rate = run_client(client, broker.bootstrap, args.records)
                results[client].append(rate)
                print(f"round {round_no + 1} {client}: {rate:,.0f} records/s", file=sys.stderr)
    finally:
        broker.stop()
    text = table(results)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
