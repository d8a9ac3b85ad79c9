"""Consumer groups with kafka-python, aiokafka and ``kcat -G`` against a real strom broker."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from aiokafka import AIOKafkaConsumer
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from strom.testing import EmbeddedBroker
from tests.compat.helpers import produce_all


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker({"group.initial.rebalance.delay.ms": 100}) as b:
        yield b


def kafka_python_member(bootstrap: str, group: str, topic: str) -> KafkaConsumer:
    return KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                         auto_offset_reset="earliest", enable_auto_commit=False,
                         session_timeout_ms=6000, heartbeat_interval_ms=500,
                         consumer_timeout_ms=100)


def test_kafka_python_members_split_and_resume_from_commits(
    broker: EmbeddedBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=4)
    produce_all(broker.bootstrap, topic, [(f"k{i}".encode(), f"v{i}".encode())
                                          for i in range(200)])
    group = f"kp-{uuid.uuid4().hex[:8]}"
    members = [kafka_python_member(broker.bootstrap, group, topic) for _ in range(2)]
    seen: list[list[bytes]] = [[], []]
    stop = threading.Event()
    balanced = threading.Event()

    def run(i: int) -> None:
        c = members[i]
        while not stop.is_set():
            for batch in c.poll(timeout_ms=100).values():
                seen[i].extend(r.value for r in batch)
            if all(len(m.assignment()) == 2 for m in members):
                balanced.set()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while (sum(len(s) for s in seen) < 200 or not balanced.is_set()) and (
        time.monotonic() < deadline):
        time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join()
    assert balanced.is_set()
    parts = [{tp.partition for tp in m.assignment()} for m in members]
    assert parts[0] | parts[1] == set(range(4)) and not parts[0] & parts[1]
    assert sorted(seen[0] + seen[1]) == sorted(f"v{i}".encode() for i in range(200))
    for m in members:
        m.commit()
        m.close()
    # A new member resumes from the commits: nothing left to read.
    fresh = kafka_python_member(broker.bootstrap, group, topic)
    committed = [fresh.committed(KTopicPartition(topic, p)) for p in range(4)]
    assert sum(c or 0 for c in committed) == 200
    fresh.close()


def test_aiokafka_members_split_the_partitions(
    broker: EmbeddedBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=4)
    produce_all(broker.bootstrap, topic, [(f"k{i}".encode(), f"v{i}".encode())
                                          for i in range(100)])
    group = f"aio-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        members = [AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                                    auto_offset_reset="earliest", session_timeout_ms=6000,
                                    heartbeat_interval_ms=500, enable_auto_commit=False)
                   for _ in range(2)]
        for m in members:
            await m.start()
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for m in members:
                for batch in (await m.getmany(timeout_ms=100)).values():
                    values.extend(r.value for r in batch)
            parts = [{tp.partition for tp in m.assignment()} for m in members]
            if len(values) >= 100 and all(len(p) == 2 for p in parts):
                break
        assert sorted(values) == sorted(f"v{i}".encode() for i in range(100))
        assert parts[0] | parts[1] == set(range(4))
        await members[0].commit()
        await members[1].stop()  # leaves; the other member takes everything
        deadline = time.monotonic() + 10
        while len(members[0].assignment()) < 4 and time.monotonic() < deadline:
            await members[0].getmany(timeout_ms=100)
        assert len(members[0].assignment()) == 4
        await members[0].stop()

    asyncio.run(scenario())


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_balanced_consumers_split_the_partitions(
    broker: EmbeddedBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=4)
    produce_all(broker.bootstrap, topic, [(f"k{i}".encode(), f"v{i}".encode())
                                          for i in range(100)])
    group = f"kcat-{uuid.uuid4().hex[:8]}"
    args = ["kcat", "-b", broker.bootstrap, "-G", group, "-o", "beginning", "-f",
            "%p %s\\n", "-X", "session.timeout.ms=6000", "-q", topic]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True) for _ in range(2)]
    time.sleep(6)
    for p in procs:
        p.terminate()
    outputs = [p.communicate(timeout=15)[0].split("\n") for p in procs]
    lines = [[line.split() for line in out if line.strip()] for out in outputs]
    partitions = [{int(p) for p, _ in ls} for ls in lines]
    values = sorted(v for ls in lines for _, v in ls)
    assert values == sorted(f"v{i}" for i in range(100))
    assert partitions[0] and partitions[1] and not partitions[0] & partitions[1]
