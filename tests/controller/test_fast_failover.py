"""Failover after kill -9 with the brokers' DEFAULT ZooKeeper session (18 s), real broker
processes and a real client (issue 22): a killed leader, the killed controller that leads,
and a killed follower each stall acks=all only until the other brokers see the process gone
(its port refuses connections), not until its session expires. ZooKeeper's partition states
stop naming the dead broker and its registration goes, so it restarts at once.

The bound is a liveness bound well below the session, not a timing (the distributions are
``bench/failover_bench.py``'s, in docs/reliability.md): before issue 22 each of these took
15-18 s."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from strom.testing.chaos.catalogue import DEFAULT_SESSION
from strom.testing.chaos.zkview import ZooKeeperView
from strom.testing.cluster import EmbeddedCluster
from strom.testing.zookeeper import zookeeper_available

pytestmark = pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed")

#: acks=all must resume this soon after the kill (the session is 18 s).
RESUMED_WITHIN_S = 8.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(3, configs=DEFAULT_SESSION) as started:
        yield started


@pytest.fixture
def view(cluster: EmbeddedCluster) -> Iterator[ZooKeeperView]:
    zk = ZooKeeperView(cluster.zookeeper_connect)
    yield zk
    zk.close()


def create(cluster: EmbeddedCluster, view: ZooKeeperView, name: str,
           replicas: list[int]) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = NewTopic(name, num_partitions=1, replica_assignment=[replicas],
                     config={"min.insync.replicas": "2"})
    admin.create_topics([topic])[name].result(30)
    view.wait_for(f"{name} led by {replicas[0]} with a full ISR", lambda: (
        view.partition_state(name, 0) or {}).get("isr") == replicas, 30)


def producer(cluster: EmbeddedCluster) -> Producer:
    """A real client with its defaults: idempotent, acks=all."""
    return Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                     "enable.idempotence": True, "linger.ms": 0})


def acked(client: Producer, topic: str, value: bytes, timeout: float = 60.0) -> float:
    """Produce one record and wait for its acknowledgement: the monotonic time it came."""
    outcome: list[tuple[object, float]] = []
    client.produce(topic, value, on_delivery=lambda err, msg: outcome.append(
        (err, time.monotonic())))
    client.flush(timeout)
    assert outcome and outcome[0][0] is None, outcome
    return outcome[0][1]


def kill_and_produce(cluster: EmbeddedCluster, view: ZooKeeperView, topic: str,
                     victim: int) -> float:
    """Kill ``victim`` under a producer that has written to ``topic``; the seconds until a
    record sent after the kill was acknowledged. Starts the victim again afterwards."""
    client = producer(cluster)
    acked(client, topic, b"before")
    killed = time.monotonic()
    cluster.brokers[victim].kill()
    resumed = acked(client, topic, b"after") - killed
    state = view.partition_state(topic, 0) or {}
    assert state.get("leader") != victim and victim not in (state.get("isr") or []), state
    view.wait_for(f"broker {victim}'s registration gone", lambda: victim not in view.brokers(),
                  RESUMED_WITHIN_S)
    print(f"killed {victim}: acks=all resumed {resumed:.2f} s after the kill; {state}")
    cluster.brokers[victim].start()  # its registration is gone: no wait for its session
    cluster.wait_for_brokers(3, 60)
    view.wait_for("the ISR full again", lambda: len(
        (view.partition_state(topic, 0) or {}).get("isr") or []) == 3, 60)
    return resumed


def test_acks_resume_soon_after_a_leader_is_killed(cluster: EmbeddedCluster,
                                                   view: ZooKeeperView) -> None:
    controller = cluster.controller_id()
    leader, *others = [n for n in sorted(cluster.brokers) if n != controller] + [controller]
    create(cluster, view, "killed-leader", [leader, *others])
    assert kill_and_produce(cluster, view, "killed-leader", leader) < RESUMED_WITHIN_S


def test_acks_resume_soon_after_the_controller_that_leads_is_killed(
        cluster: EmbeddedCluster, view: ZooKeeperView) -> None:
    controller = cluster.controller_id()
    others = [n for n in sorted(cluster.brokers) if n != controller]
    create(cluster, view, "killed-controller", [controller, *others])
    assert kill_and_produce(cluster, view, "killed-controller", controller) < RESUMED_WITHIN_S
    view.wait_for("a new controller", lambda: view.controller() in others, 10)


def test_acks_resume_soon_after_a_follower_is_killed(cluster: EmbeddedCluster,
                                                     view: ZooKeeperView) -> None:
    controller = cluster.controller_id()
    follower, leader = [n for n in sorted(cluster.brokers) if n != controller]
    create(cluster, view, "killed-follower", [leader, follower, controller])
    assert kill_and_produce(cluster, view, "killed-follower", follower) < RESUMED_WITHIN_S
    assert (view.partition_state("killed-follower", 0) or {}).get("leader") == leader
