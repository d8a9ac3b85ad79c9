"""What the chaos harness needs from a cluster fixture, as Protocols, so it does not depend on
:class:`strom.testing.cluster.EmbeddedCluster` (or any other fixture) itself.

A network partition additionally needs the brokers to run in the namespaces of a
:class:`~strom.testing.chaos.netns.NetworkFabric`: the fixture exposes it as ``network``
(None when brokers share the host's network)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from strom.testing.chaos.netns import NetworkFabric


class BrokerProcess(Protocol):
    """One broker process (as :class:`strom.testing.EmbeddedBroker`): ``kill`` is kill -9,
    ``stop`` a clean shutdown; both keep the data directory; ``start`` starts it again."""

    @property
    def data_dir(self) -> Path: ...

    @property
    def bootstrap(self) -> str: ...

    @property
    def pid(self) -> int | None: ...

    def kill(self) -> None: ...

    def stop(self, timeout: float = ...) -> int: ...

    def start(self) -> Any: ...


class Cluster(Protocol):
    """Brokers on one ZooKeeper chroot (``zookeeper_connect`` includes it)."""

    @property
    def bootstrap(self) -> str: ...

    @property
    def zookeeper_connect(self) -> str: ...

    @property
    def brokers(self) -> Mapping[int, BrokerProcess]: ...

    def controller_id(self, timeout: float = 10.0) -> int: ...

    def pause(self, node_id: int) -> None: ...

    def resume(self, node_id: int) -> None: ...

    def stall(self, node_id: int) -> None: ...

    def wait_for_brokers(self, count: int, timeout: float = 30.0) -> None: ...

    def stop(self) -> None:
        """Stop every broker cleanly (and the cluster's ZooKeeper, if it runs one); the
        data stays."""

    def start(self, timeout: float = 60.0) -> Any:
        """Start what :meth:`stop` stopped; returns once every broker serves."""


if TYPE_CHECKING:
    from strom.testing.cluster import EmbeddedCluster

    def _embedded_cluster_is_a_cluster(cluster: EmbeddedCluster) -> Cluster:
        return cluster  # mypy checks that the fixture satisfies the protocol


def network_of(cluster: Cluster) -> NetworkFabric | None:
    """The cluster's network fabric, if its brokers run in namespaces."""
    network: NetworkFabric | None = getattr(cluster, "network", None)
    return network
