"""Network partitions between real broker processes, each in a network namespace: the cut
blocks broker↔broker connections (both ways) and optionally broker↔ZooKeeper, never the
client's, and healing restores everything; the fabric leaves nothing behind."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from strom.testing.chaos import netns
from strom.testing.chaos.history import History
from strom.testing.chaos.nemesis import Nemesis
from strom.testing.cluster import EmbeddedCluster
from strom.testing.zookeeper import zookeeper_available

#: why brokers cannot run in network namespaces here (None: they can)
NO_NETNS = netns.unavailable_reason()

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed"),
    pytest.mark.skipif(NO_NETNS is not None, reason=str(NO_NETNS)),
]

CONNECT = """
import socket, sys
host, _, port = sys.argv[1].rpartition(":")
try:
    socket.create_connection((host, int(port)), timeout=float(sys.argv[2])).close()
except OSError as exc:
    print(type(exc).__name__)
    sys.exit(1)
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(3, network=True) as cluster:
        yield cluster


@pytest.fixture
def nemesis(cluster: EmbeddedCluster) -> Iterator[Nemesis]:
    nemesis = Nemesis(cluster, History())
    yield nemesis
    nemesis.heal_all()
    nemesis.close()


def connects(cluster: EmbeddedCluster, source: int | None, target: int,
             timeout: float = 1.0) -> bool:
    """Whether a TCP connection from broker ``source``'s namespace (None: the host, where
    the clients are) to broker ``target``'s port opens within ``timeout``."""
    assert cluster.network is not None
    preexec = cluster.network.preexec(source) if source is not None else None
    result = subprocess.run([sys.executable, "-c", CONNECT, cluster.brokers[target].bootstrap,
                             str(timeout)], preexec_fn=preexec, capture_output=True, text=True)
    return result.returncode == 0


def produces(bootstrap: str) -> bool:
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 5000})
    producer.produce("netns-probe", b"x")
    return producer.flush(10) == 0


def test_brokers_live_in_their_own_namespaces(cluster: EmbeddedCluster) -> None:
    assert cluster.network is not None
    hosts = {node: b.bootstrap.rpartition(":")[0] for node, b in cluster.brokers.items()}
    assert hosts == {node: cluster.network.host(node) for node in range(3)}
    assert all(connects(cluster, s, t) for s in (None, 0, 1, 2) for t in range(3))


def test_isolating_a_broker_cuts_it_from_the_others_but_not_from_clients(
        cluster: EmbeddedCluster, nemesis: Nemesis) -> None:
    nemesis.isolate(0)
    assert not connects(cluster, 0, 1) and not connects(cluster, 0, 2)   # out...
    assert not connects(cluster, 1, 0) and not connects(cluster, 2, 0)   # ...and in
    assert connects(cluster, 1, 2) and connects(cluster, 2, 1)          # others untouched
    assert connects(cluster, None, 0) and produces(cluster.brokers[0].bootstrap)
    assert nemesis.view.brokers() == {0, 1, 2}   # still talks to ZooKeeper
    nemesis.heal_network()
    assert connects(cluster, 0, 1) and connects(cluster, 2, 0)


def test_cutting_a_broker_from_zookeeper_expires_its_session(
        cluster: EmbeddedCluster, nemesis: Nemesis) -> None:
    nemesis.isolate(2, zookeeper=True)
    nemesis.view.wait_for("broker 2's session to expire",
                          lambda: 2 not in nemesis.view.brokers(), timeout=30)
    assert connects(cluster, None, 2)
    nemesis.heal_network()
    nemesis.view.wait_for("broker 2 registered again",
                          lambda: 2 in nemesis.view.brokers(), timeout=30)


def test_a_fabric_removes_everything_it_made() -> None:
    def state() -> tuple[str, str]:
        return (subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout,
                subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout)

    with netns.NetworkFabric() as fabric:
        fabric.add_node(0)
        fabric.add_node(1)
        fabric.isolate(0)
        namespaces, links = state()
        assert fabric.namespace(0) in namespaces and fabric.bridge in links
    namespaces, links = state()
    assert fabric.namespace(0) not in namespaces and fabric.namespace(1) not in namespaces
    assert f"{fabric.bridge}:" not in links and f"sch{fabric.index}r0" not in links
