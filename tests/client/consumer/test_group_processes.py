"""Real group rebalances of several consumer processes (strom.client.sync.SyncConsumer in
each), and strom's consumer sharing a group with kafka-python's / confluent-kafka's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.client.sync import SyncAdminClient, SyncConsumer, SyncProducer
from tests.client.consumer.test_consumer import unique

WORKER = Path(__file__).with_name("group_worker.py")
ROOT = Path(__file__).resolve().parents[3]


class Worker:
    def __init__(self, bootstrap: str, group: str, topic: str, assignor: str,
                 out: Path) -> None:
        self.out = out
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen([sys.executable, str(WORKER), bootstrap, group, topic,
                                      assignor, str(out)], env=env)

    def lines(self) -> list[str]:
        return self.out.read_text().splitlines() if self.out.exists() else []

    def records(self) -> list[tuple[int, int]]:
        return [(int(p), int(o)) for kind, p, o in
                (line.split() for line in self.lines() if line.startswith("record "))]

    def events(self, kind: str) -> list[set[int]]:
        return [{int(p) for p in line.split(" ", 1)[1].split(",") if p}
                for line in self.lines() if line.startswith(kind + " ")]

    def assignment(self) -> set[int]:
        owned: set[int] = set()
        for line in self.lines():
            kind, _, rest = line.partition(" ")
            if kind not in ("assigned", "revoked", "lost"):
                continue
            tps = {int(p) for p in rest.split(",") if p}
            if kind == "assigned":
                owned |= tps
            elif kind in ("revoked", "lost"):
                owned -= tps
        return owned

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for w in started:
        w.stop()


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def produce(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    with SyncProducer(bootstrap) as producer:
        for i in range(count):
            producer.send(topic, b"x", partition=i % partitions)
        producer.flush()


def all_records(workers: list[Worker]) -> Counter[tuple[int, int]]:
    return Counter(r for w in workers for r in w.records())


def stable(workers: list[Worker], partitions: int) -> bool:
    owned = [w.assignment() for w in workers]
    return sum(len(o) for o in owned) == partitions and set().union(*owned) == \
        set(range(partitions))


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "sticky", "cooperative-sticky"])
def test_three_processes_one_leaves_one_is_killed_nothing_lost_or_duplicated(
        broker: Any, tmp_path: Path, workers: list[Worker], assignor: str) -> None:
    three_processes_one_leaves_one_is_killed(broker.bootstrap, tmp_path, workers, assignor)


def three_processes_one_leaves_one_is_killed(bootstrap: str, tmp_path: Path,
                                             workers: list[Worker], assignor: str) -> None:
    """Three worker processes share 6 partitions; one leaves cleanly, one is killed; every
    record is read exactly once (``assignor``: a worker's, or ``consumer-protocol``)."""
    partitions = 6
    topic, group = unique("procs"), unique("g")
    with SyncAdminClient(bootstrap) as admin:
        admin.create_topic(topic, partitions, 1)
    for i in range(3):
        workers.append(Worker(bootstrap, group, topic, assignor, tmp_path / f"w{i}"))
    wait_for(lambda: stable(workers, partitions) and all(
        len(w.assignment()) == 2 for w in workers), "three members with two partitions each")
    produce(bootstrap, topic, partitions, 300)
    wait_for(lambda: sum(all_records(workers).values()) >= 300, "the first 300 records")
    # One member leaves cleanly: it commits in its revoke listener and sends LeaveGroup.
    workers[0].proc.send_signal(signal.SIGTERM)
    assert workers[0].proc.wait(30) == 0 and workers[0].lines()[-1] == "closed"
    wait_for(lambda: stable(workers[1:], partitions), "the two others to take over")
    produce(bootstrap, topic, partitions, 300)
    wait_for(lambda: sum(all_records(workers).values()) >= 600, "the next 300 records")
    time.sleep(1)  # the last batch's commit
    # One is killed: after the session timeout the last one owns every partition.
    workers[1].stop()
    produce(bootstrap, topic, partitions, 300)
    wait_for(lambda: len(workers[2].assignment()) == partitions, "the survivor to own all")
    wait_for(lambda: sum(all_records(workers).values()) >= 900, "the last 300 records")
    time.sleep(1)
    seen = all_records(workers)
    assert sum(seen.values()) == 900 and max(seen.values()) == 1, \
        [r for r, n in seen.items() if n > 1][:5]
    assert sorted(seen) == sorted((p, o) for p in range(partitions) for o in range(150))


def test_cooperative_sticky_revokes_only_the_partitions_that_move(
        broker: Any, tmp_path: Path, workers: list[Worker]) -> None:
    bootstrap, partitions = broker.bootstrap, 6
    topic, group = unique("coop"), unique("g")
    with SyncAdminClient(bootstrap) as admin:
        admin.create_topic(topic, partitions, 1)
    for i in range(2):
        workers.append(Worker(bootstrap, group, topic, "cooperative-sticky",
                              tmp_path / f"w{i}"))
    wait_for(lambda: stable(workers, partitions) and all(
        len(w.assignment()) == 3 for w in workers), "two members with three each")
    before = [w.assignment() for w in workers]
    revoked_before = [len(w.events("revoked")) for w in workers]
    workers.append(Worker(bootstrap, group, topic, "cooperative-sticky", tmp_path / "w2"))
    wait_for(lambda: stable(workers, partitions) and all(
        len(w.assignment()) == 2 for w in workers), "three members with two each")
    moved = workers[2].assignment()
    for w, owned in zip(workers[:2], before, strict=True):
        assert w.assignment() <= owned  # kept partitions never moved
    revoked = [set().union(*w.events("revoked")[n:]) for w, n in
               zip(workers[:2], revoked_before, strict=True)]
    assert revoked[0] | revoked[1] == moved and not revoked[0] & revoked[1]
    assert all(len(r) == 1 for r in revoked)


def test_strom_and_kafka_python_share_a_group(broker: Any) -> None:
    """kafka-python polls on a thread of its own, as an application would: kafka-python
    3.0.12 starts a new JoinGroup when its join task finished while no poll was waiting for
    it (``join_group_async``: ``self._join_task.is_done``), so a test that alternates short
    polls of both consumers on one thread makes it rejoin after every successful sync."""
    kafka = pytest.importorskip("kafka")
    bootstrap, partitions = broker.bootstrap, 6
    topic, group = unique("mixed"), unique("g")
    with SyncAdminClient(bootstrap) as admin:
        admin.create_topic(topic, partitions, 1)
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    theirs = kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                 partition_assignment_strategy=[RoundRobinPartitionAssignor],
                                 session_timeout_ms=10000, heartbeat_interval_ms=500)
    stopping = threading.Event()
    theirs_owned: list[frozenset[int]] = [frozenset()]  # replaced whole, read by the test

    def poll_theirs() -> None:
        while not stopping.is_set():
            theirs.poll(timeout_ms=200)
            theirs_owned[0] = frozenset(tp.partition for tp in theirs.assignment())

    thread = threading.Thread(target=poll_theirs, daemon=True)
    thread.start()
    ours = SyncConsumer(bootstrap, group_id=group, partition_assignment_strategy="roundrobin",
                        session_timeout_ms=10000, heartbeat_interval_ms=500, max_wait_ms=100)
    try:
        ours.subscribe([topic])
        deadline = time.monotonic() + 60
        while True:
            ours.poll(0.1)
            mine = {tp.partition for tp in ours.assignment()}
            other = set(theirs_owned[0])
            if len(mine) == len(other) == partitions // 2:
                break
            assert time.monotonic() < deadline, (mine, other)
        assert mine | other == set(range(partitions)) and not mine & other
    finally:
        ours.close()
        stopping.set()
        thread.join(10)
        theirs.close()


class ConfluentMember:
    """A confluent-kafka (librdkafka) consumer in ``group``, polled on a thread of its own as
    an application would (librdkafka serves rebalance callbacks inside ``poll``)."""

    def __init__(self, bootstrap: str, group: str, topic: str, assignor: str) -> None:
        ck = pytest.importorskip("confluent_kafka")
        self.consumer = ck.Consumer({
            "bootstrap.servers": bootstrap, "group.id": group,
            "partition.assignment.strategy": assignor, "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest"})
        self.owned: set[int] = set()
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked,
                                on_lost=self._revoked)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            self.consumer.poll(0.1)

    # Rebalance callbacks, on the polling thread: an eager assignor hands over the whole
    # assignment, cooperative-sticky only the increments. (``Consumer.assignment()`` from
    # another thread while one polls can block for good, hence the callbacks.)
    def _assigned(self, _consumer: Any, tps: list[Any]) -> None:
        self.owned |= {tp.partition for tp in tps}

    def _revoked(self, _consumer: Any, tps: list[Any]) -> None:
        self.owned -= {tp.partition for tp in tps}

    def partitions(self) -> set[int]:
        return set(self.owned)

    def close(self) -> None:
        """Stop polling and close: librdkafka revokes and sends LeaveGroup."""
        if not self.stopping.is_set():
            self.stopping.set()
            self.thread.join(30)
            self.consumer.close()


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "cooperative-sticky"])
def test_strom_and_confluent_kafka_share_a_group_and_take_over_when_one_leaves(
        broker: Any, assignor: str) -> None:
    bootstrap, partitions = broker.bootstrap, 6
    topic, group = unique("ck-mixed"), unique("g")
    everything = set(range(partitions))
    with SyncAdminClient(bootstrap) as admin:
        admin.create_topic(topic, partitions, 1)

    def ours_until(condition: Callable[[set[int]], bool], what: str) -> set[int]:
        deadline = time.monotonic() + 60
        while True:
            ours.poll(0.1)
            mine = {tp.partition for tp in ours.assignment()}
            if condition(mine):
                return mine
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {mine}"

    def split_evenly(theirs: ConfluentMember) -> Callable[[set[int]], bool]:
        def check(mine: set[int]) -> bool:
            other = theirs.partitions()
            return len(mine) == len(other) == partitions // 2
        return check

    ours = SyncConsumer(bootstrap, group_id=group, partition_assignment_strategy=assignor,
                        session_timeout_ms=10000, heartbeat_interval_ms=500, max_wait_ms=100)
    first = ConfluentMember(bootstrap, group, topic, assignor)
    second: ConfluentMember | None = None
    try:
        ours.subscribe([topic])
        mine = ours_until(split_evenly(first), "an even split with librdkafka")
        assert mine | first.partitions() == everything and not mine & first.partitions()
        first.close()  # librdkafka leaves: strom's member takes over every partition
        ours_until(lambda mine: mine == everything, "strom to own every partition")
        second = ConfluentMember(bootstrap, group, topic, assignor)
        mine = ours_until(split_evenly(second), "an even split after librdkafka rejoins")
        assert mine | second.partitions() == everything and not mine & second.partitions()
        ours.close()  # strom leaves: librdkafka takes over every partition
        wait_for(lambda: second.partitions() == everything, "librdkafka to own every partition",
                 timeout_s=60)
    finally:
        ours.close()
        first.close()
        if second is not None:
            second.close()
