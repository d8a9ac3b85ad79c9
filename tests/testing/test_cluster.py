"""EmbeddedCluster as users' tests drive it: real ZooKeeper, real broker processes, real
clients (confluent-kafka)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from strom.cli.cluster_probe import brokers_listed, registered_brokers
from strom.client.sync import SyncAdminClient
from strom.testing import EmbeddedCluster
from strom.testing.chaos import netns
from strom.testing.cluster import NetworkUnavailable

#: why brokers cannot run in network namespaces here (None: they can)
NO_NETNS = netns.unavailable_reason()


def _brokers(bootstrap: str) -> list[int]:
    return sorted(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers)


def test_a_cluster_serves_replicated_topics_and_survives_a_kill_and_restart(
        strom_cluster_factory: Callable[..., EmbeddedCluster]) -> None:
    cluster = strom_cluster_factory(3, racks=["a", "b", "c"])
    assert sorted(cluster.brokers) == [0, 1, 2]
    assert cluster.bootstrap == ",".join(f"127.0.0.1:{cluster.brokers[i].port}"
                                         for i in range(3))
    assert cluster.zookeeper_connect == f"127.0.0.1:{cluster.zookeeper.port}/strom"
    assert registered_brokers(cluster.zookeeper_connect) == {0, 1, 2}
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("replicated", 3, 3)])["replicated"].result(15)
    topic = admin.list_topics("replicated", timeout=10).topics["replicated"]
    assert all(sorted(p.replicas) == [0, 1, 2] for p in topic.partitions.values())

    controller = cluster.controller_id()
    assert controller in cluster.brokers
    victim = cluster.brokers[controller]
    port, pid = victim.port, victim.pid
    assert pid is not None
    victim.kill()
    assert victim.pid is None
    cluster.wait_for_brokers(2, timeout=20)  # the session lapses (2 s), the others see it
    assert controller not in registered_brokers(cluster.zookeeper_connect)
    assert cluster.controller_id() != controller  # another broker took over

    victim.restart()  # same port: the clients' bootstrap stays valid
    assert victim.port == port and victim.pid not in (None, pid)
    cluster.wait_for_brokers(3, timeout=20)
    assert _brokers(victim.bootstrap) == [0, 1, 2]  # the restarted broker serves again
    topic = admin.list_topics("replicated", timeout=10).topics["replicated"]
    assert all(sorted(p.replicas) == [0, 1, 2] for p in topic.partitions.values())


def test_pause_and_resume_a_broker(strom_cluster_factory: Callable[..., EmbeddedCluster]
                                   ) -> None:
    cluster = strom_cluster_factory(2)
    paused = cluster.brokers[1]
    cluster.pause(1)
    assert brokers_listed(paused.bootstrap, timeout=1.0) is None  # silent while stopped
    cluster.wait_for_brokers(1, timeout=20)  # its session lapses: broker 0 lists only itself
    assert _brokers(cluster.brokers[0].bootstrap) == [0]
    cluster.resume(1)
    assert brokers_listed(paused.bootstrap, timeout=5.0) is not None  # it answers again


def test_stop_then_start_restarts_the_same_cluster(tmp_path: Path,
                                                   strom_cluster_factory: Callable[
                                                       ..., EmbeddedCluster]) -> None:
    cluster = strom_cluster_factory(2, data_dir=tmp_path, configs={"broker.rack": "r"},
                                    broker_configs={1: {"broker.rack": "r1"}})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("kept", 2, 2)])["kept"].result(15)
    bootstrap = cluster.bootstrap
    cluster.stop()
    assert all(b.pid is None for b in cluster.brokers.values())
    cluster.start()
    assert cluster.bootstrap == bootstrap
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    assert len(metadata.topics["kept"].partitions) == 2
    with SyncAdminClient(bootstrap) as sync_admin:
        cluster_info = sync_admin.describe_cluster()
    assert {b.node_id: b.rack for b in cluster_info.brokers} == {0: "r", 1: "r1"}
    assert (tmp_path / "zookeeper" / "zoo.cfg").exists()
    assert (tmp_path / "broker-1" / "meta.properties").exists()
    cluster.close()
    assert tmp_path.exists()  # a given directory is the user's: close() keeps it


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="racks names 1 racks for 2 brokers"):
        EmbeddedCluster(2, racks=["a"])
    with pytest.raises(ValueError, match="at least one broker"):
        EmbeddedCluster(0)


def test_controller_id_times_out_without_a_controller(
        strom_cluster_factory: Callable[..., EmbeddedCluster]) -> None:
    cluster = strom_cluster_factory(1)
    cluster.brokers[0].stop()
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="no controller elected"):
        cluster.controller_id(timeout=1.0)
    assert time.monotonic() - started < 5


def test_network_where_namespaces_cannot_be_made_is_refused_with_the_reason(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        strom_cluster_factory: Callable[..., EmbeddedCluster]) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no `ip` (nor root, for a non-root run)
    reason = "needs? (root|`ip` from iproute2)"
    with pytest.raises(NetworkUnavailable, match=reason):
        EmbeddedCluster(1, network=True)
    with pytest.raises(pytest.skip.Exception, match=reason):  # the fixture skips the test
        strom_cluster_factory(1, network=True)


@pytest.mark.skipif(NO_NETNS is not None, reason=str(NO_NETNS))
def test_a_network_cluster_runs_each_broker_in_a_namespace_and_removes_them_on_close(
        ) -> None:
    cluster = EmbeddedCluster(1, network=True)
    try:
        assert cluster.network is not None
        namespace, bridge = cluster.network.namespace(0), cluster.network.bridge
        cluster.start()
        broker = cluster.brokers[0]
        assert broker.host == cluster.network.host(0)
        assert cluster.bootstrap == f"{cluster.network.host(0)}:{broker.port}"
        in_namespace = os.stat(f"/run/netns/{namespace}").st_ino
        assert os.stat(f"/proc/{broker.pid}/ns/net").st_ino == in_namespace
        assert os.stat("/proc/self/ns/net").st_ino != in_namespace
        assert str(broker.config["zookeeper.connect"]) == (
            f"{cluster.network.services_address}:{cluster.zookeeper.port}/strom")
        assert _brokers(cluster.bootstrap) == [0]  # served from the host namespace
        bootstrap = cluster.bootstrap
        cluster.stop()
        cluster.start()  # stop / start keep the fabric and the addresses
        assert cluster.bootstrap == bootstrap and _brokers(bootstrap) == [0]
    finally:
        cluster.close()
    assert namespace not in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                           text=True).stdout
    assert f"{bridge}:" not in subprocess.run(["ip", "-o", "link"], capture_output=True,
                                              text=True).stdout
