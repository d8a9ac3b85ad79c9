"""Each fault primitive against real broker processes on a real ZooKeeper: a killed broker is
gone, a paused one answers nothing, a stalled one answers nothing until its stall ends, an
expired session really loses the registration (and the broker registers again), the
controller moves when it is killed, a rolling restart replaces every process."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from strom.testing.chaos.history import NEMESIS, History
from strom.testing.chaos.nemesis import Nemesis
from strom.testing.cluster import EmbeddedCluster
from strom.testing.zookeeper import zookeeper_available

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed"),
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(3) as cluster:
        yield cluster


@pytest.fixture
def nemesis(cluster: EmbeddedCluster) -> Iterator[Nemesis]:
    """A nemesis per test; whatever a test leaves broken is healed for the next one."""
    nemesis = Nemesis(cluster, History(), seed=1)
    yield nemesis
    nemesis.heal_all()
    nemesis.close()


def answers(bootstrap: str, timeout: float = 2.0) -> bool:
    """Whether the broker at ``bootstrap`` answers a Metadata request in time."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 1000})
    try:
        admin.list_topics(timeout=timeout)
        return True
    except KafkaException:
        return False


def accepts(bootstrap: str) -> bool:
    host, _, port = bootstrap.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
        return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def nemesis_ops(nemesis: Nemesis) -> list[str]:
    return [op.f for op in nemesis.history.ops if op.process == NEMESIS]


def test_kill_and_start(cluster: EmbeddedCluster, nemesis: Nemesis) -> None:
    broker = cluster.brokers[1]
    pid = broker.pid
    assert pid is not None and answers(broker.bootstrap)
    nemesis.kill(1)
    assert not pid_alive(pid) and not accepts(broker.bootstrap)
    nemesis.start(1)   # waits for the old registration to expire first
    assert broker.pid != pid and answers(broker.bootstrap)
    assert nemesis.view.brokers() == {0, 1, 2}
    assert nemesis_ops(nemesis) == ["kill", "killed", "start", "started"]


def test_a_paused_broker_answers_nothing_until_resumed(cluster: EmbeddedCluster,
                                                        nemesis: Nemesis) -> None:
    broker = cluster.brokers[2]
    nemesis.pause(2)
    try:
        assert accepts(broker.bootstrap)      # the kernel still accepts...
        assert not answers(broker.bootstrap)  # ...but the process does not answer
        with open(f"/proc/{broker.pid}/stat") as stat:
            assert stat.read().split(") ", 1)[1][0] == "T"
    finally:
        nemesis.resume(2)
    assert answers(broker.bootstrap, timeout=10)


def test_a_stalled_broker_accepts_but_answers_nothing_until_the_stall_ends(
        cluster: EmbeddedCluster, nemesis: Nemesis) -> None:
    broker = cluster.brokers[1]
    assert cluster.stall_seconds == 2.0
    nemesis.stall(1)  # its event loop blocked for 2 s; the process runs on
    assert accepts(broker.bootstrap)
    assert not answers(broker.bootstrap, timeout=1.0)
    assert answers(broker.bootstrap, timeout=10)
    assert nemesis_ops(nemesis) == ["stall"]


def test_an_expired_session_loses_the_registration_and_the_broker_registers_again(
        cluster: EmbeddedCluster, nemesis: Nemesis) -> None:
    pid = cluster.brokers[0].pid
    nemesis.expire_session(0)
    assert nemesis_ops(nemesis) == ["pause", "session-expired", "resume", "re-registered"]
    assert cluster.brokers[0].pid == pid and nemesis.view.brokers() == {0, 1, 2}
    assert answers(cluster.brokers[0].bootstrap, timeout=10)


def test_killing_the_controller_moves_it(cluster: EmbeddedCluster, nemesis: Nemesis) -> None:
    old = cluster.controller_id()
    assert nemesis.kill_controller() == old
    nemesis.view.wait_for("a new controller",
                          lambda: nemesis.view.controller() not in (-1, old), timeout=30)
    nemesis.heal_all()
    assert nemesis.view.brokers() == {0, 1, 2} and not nemesis.killed


def test_a_rolling_restart_replaces_every_process(cluster: EmbeddedCluster,
                                                  nemesis: Nemesis) -> None:
    before = {node: broker.pid for node, broker in cluster.brokers.items()}
    nemesis.rolling_restart()
    after = {node: broker.pid for node, broker in cluster.brokers.items()}
    assert all(after[node] not in (None, before[node]) for node in before)
    assert nemesis.view.brokers() == {0, 1, 2}
    assert all(answers(b.bootstrap, timeout=10) for b in cluster.brokers.values())


def test_a_log_is_cut_only_on_a_stopped_broker(cluster: EmbeddedCluster,
                                               nemesis: Nemesis) -> None:
    with pytest.raises(RuntimeError, match="must be stopped"):
        nemesis.truncate(0, "t", 0, 0)
