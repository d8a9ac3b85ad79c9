"""Consumer groups with librdkafka (confluent-kafka) against a real strom broker."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from strom.testing import EmbeddedBroker
from tests.compat.helpers import create_topic, produce_all

GROUP_BROKER_CONFIG = {"group.initial.rebalance.delay.ms": 100}
SESSION_MS = 6000


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(GROUP_BROKER_CONFIG) as b:
        yield b


def consumer(bootstrap: str, group: str, **extra: object) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "auto.offset.reset": "earliest", "session.timeout.ms": SESSION_MS,
                     "heartbeat.interval.ms": 500, "enable.auto.commit": False, **extra})


def assigned(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def poll_until(consumers: list[Consumer], done: Callable[[], bool], timeout: float = 30,
               sink: dict[int, list[object]] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "condition not reached in time"
        for i, c in enumerate(consumers):
            for msg in c.consume(num_messages=1000, timeout=0.05):
                if not msg.error() and sink is not None:
                    sink.setdefault(i, []).append(msg)


def test_three_members_split_then_one_leaves(broker: EmbeddedBroker,
                                             new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=6)
    group = f"g-{uuid.uuid4().hex[:8]}"
    members = [consumer(broker.bootstrap, group) for _ in range(3)]
    for c in members:
        c.subscribe([topic])
    # The split settles before there is anything to read: a member that joins after the
    # others consumed (nothing is committed) would have its partitions read again.
    poll_until(members, lambda: all(len(assigned(c)) == 2 for c in members))
    produce_all(broker.bootstrap, topic, [(None, f"v{i}".encode()) for i in range(300)])
    got: dict[int, list[object]] = {}
    poll_until(members, lambda: sum(len(v) for v in got.values()) >= 300, sink=got)
    parts = [assigned(c) for c in members]
    assert all(len(p) == 2 for p in parts) and set().union(*parts) == set(range(6))
    values = sorted(m.value() for v in got.values() for m in v)  # type: ignore[attr-defined]
    assert values == sorted(f"v{i}".encode() for i in range(300))  # each record once
    members[2].close()  # LeaveGroup: the other two take over at once
    started = time.monotonic()
    poll_until(members[:2], lambda: assigned(members[0]) | assigned(members[1]) == set(range(6))
               and len(assigned(members[0])) == 3)
    assert time.monotonic() - started < SESSION_MS / 1000
    for c in members[:2]:
        c.close()


KILLABLE = textwrap.dedent("""
    import sys, time
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    c.subscribe([sys.argv[3]])
    while True:
        c.poll(0.1)
        if c.assignment():
            print("assigned", flush=True)
""")


def test_killed_member_is_replaced_within_the_session_timeout(
    broker: EmbeddedBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen([sys.executable, "-c", KILLABLE, broker.bootstrap, group, topic],
                            stdout=subprocess.PIPE, text=True)
    survivor = consumer(broker.bootstrap, group)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "assigned"
        survivor.subscribe([topic])
        poll_until([survivor], lambda: len(assigned(survivor)) == 2)
        proc.kill()  # no LeaveGroup: only the session timeout can notice
        proc.wait()
        killed_at = time.monotonic()
        poll_until([survivor], lambda: len(assigned(survivor)) == 4)
        assert time.monotonic() - killed_at < SESSION_MS / 1000 + 5
    finally:
        proc.kill()
        survivor.close()


def test_static_member_restart_keeps_assignment_without_rebalance(
    broker: EmbeddedBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    assigns: list[list[int]] = []

    def on_assign(_c: Consumer, partitions: list[TopicPartition]) -> None:
        assigns.append(sorted(p.partition for p in partitions))

    steady = consumer(broker.bootstrap, group, **{"group.instance.id": "steady"})
    steady.subscribe([topic], on_assign=on_assign)
    restarting = consumer(broker.bootstrap, group, **{"group.instance.id": "restarting"})
    restarting.subscribe([topic])
    poll_until([steady, restarting], lambda: len(assigned(steady)) == 2
               and len(assigned(restarting)) == 2)
    before = assigned(restarting)
    rebalances = len(assigns)
    restarting.close()  # a static member does not leave the group on close
    again = consumer(broker.bootstrap, group, **{"group.instance.id": "restarting"})
    again.subscribe([topic])
    poll_until([steady, again], lambda: bool(assigned(again)))
    assert assigned(again) == before
    for _ in range(20):  # the steady member sees no rebalance
        steady.poll(0.05)
        again.poll(0.05)
    assert len(assigns) == rebalances
    steady.close()
    again.close()


def test_cooperative_sticky_moves_only_what_must_move(
    broker: EmbeddedBroker, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=6)
    group = f"g-{uuid.uuid4().hex[:8]}"
    revoked: list[int] = []

    def on_revoke(_c: Consumer, partitions: list[TopicPartition]) -> None:
        revoked.extend(p.partition for p in partitions)

    strategy = {"partition.assignment.strategy": "cooperative-sticky"}
    first = consumer(broker.bootstrap, group, **strategy)
    first.subscribe([topic], on_revoke=on_revoke)
    poll_until([first], lambda: len(assigned(first)) == 6)
    second = consumer(broker.bootstrap, group, **strategy)
    second.subscribe([topic])
    poll_until([first, second], lambda: len(assigned(first)) == 3
               and len(assigned(second)) == 3)
    assert len(revoked) == 3  # only the partitions that moved were revoked
    assert assigned(second) == set(revoked)
    first.close()
    second.close()


def test_commits_survive_broker_restart_and_a_new_member_resumes_there(
    tmp_path: object,
) -> None:
    with EmbeddedBroker(GROUP_BROKER_CONFIG) as b:
        topic = "resume"
        create_topic(b.bootstrap, topic, 2)
        producer = Producer({"bootstrap.servers": b.bootstrap})
        for i in range(100):
            producer.produce(topic, f"v{i}".encode(), partition=i % 2)
        assert producer.flush(30) == 0
        group = "resumers"
        c = consumer(b.bootstrap, group)
        c.subscribe([topic])
        seen: dict[int, list[object]] = {}
        while len(seen.get(0, [])) < 20:
            msg = c.poll(0.1)
            if msg is not None and not msg.error():
                seen.setdefault(0, []).append(msg)
        positions = {}
        for m in seen[0]:
            positions[m.partition()] = m.offset() + 1  # type: ignore[attr-defined]
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in positions.items()],
                 asynchronous=False)
        c.close()
        b.restart()
        resumed = consumer(b.bootstrap, group)
        committed = resumed.committed([TopicPartition(topic, p) for p in range(2)], timeout=10)
        assert {tp.partition: tp.offset for tp in committed if tp.offset >= 0} == positions
        resumed.subscribe([topic])
        first: dict[int, int] = {}
        deadline = time.monotonic() + 30
        while len(first) < len(positions) and time.monotonic() < deadline:
            msg = resumed.poll(0.1)
            if msg is not None and not msg.error():
                first.setdefault(msg.partition(), msg.offset())
        assert {p: first[p] for p in positions} == positions
        resumed.close()
