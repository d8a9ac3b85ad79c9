"""pytest plugin (registered through the ``pytest11`` entry point when strom is installed).

Fixtures:
- ``strom_broker``: one broker for the whole session; yields its :class:`EmbeddedBroker`
  (use ``.bootstrap`` for the address).
- ``strom_broker_factory``: call it to start dedicated brokers, stopped (and their temporary
  data directories removed) at the end of the test::

      strom_broker_factory(config: Mapping[str, object] | None = None, *,
                           data_dir: str | Path | None = None, port: int = 0,
                           host: str = "127.0.0.1", log_level: str = "WARNING")
          -> EmbeddedBroker

  ``config`` holds broker keys (``strom broker --help-config``), as ``--set`` would.
- ``strom_cluster``: a cluster of ZooKeeper and three brokers per test module; yields its
  :class:`~strom.testing.cluster.EmbeddedCluster` (``.bootstrap``, ``.brokers`` …).
- ``strom_cluster_factory``: call it with :class:`EmbeddedCluster`'s arguments to start
  dedicated clusters, closed at the end of the test. Both skip where ZooKeeper (Debian's
  ``zookeeper`` package and java) is not installed; ``network=True`` (brokers in network
  namespaces) also skips, with the reason, where namespaces cannot be made (not root, no
  iproute2).
- ``zookeeper_server``: a real ZooKeeper server (:mod:`strom.testing.zookeeper`) per test
  module; ``zookeeper_connect``: its connect string with a fresh chroot per test.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import pytest

from strom.testing.broker import EmbeddedBroker
from strom.testing.cluster import EmbeddedCluster, NetworkUnavailable
from strom.testing.zookeeper import ZooKeeperServer, zookeeper_available


class BrokerFactory(Protocol):
    """The ``strom_broker_factory`` fixture: starts an :class:`EmbeddedBroker` per call."""

    def __call__(self, config: Mapping[str, object] | None = None, *,
                 data_dir: str | Path | None = None, port: int = 0, host: str = "127.0.0.1",
                 log_level: str = "WARNING") -> EmbeddedBroker: ...


@pytest.fixture(scope="session")
def strom_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture
def strom_broker_factory() -> Iterator[BrokerFactory]:
    brokers: list[EmbeddedBroker] = []

    def start(config: Mapping[str, object] | None = None, *,
              data_dir: str | Path | None = None, port: int = 0, host: str = "127.0.0.1",
              log_level: str = "WARNING") -> EmbeddedBroker:
        broker = EmbeddedBroker(config, data_dir=data_dir, port=port, host=host,
                                log_level=log_level).start()
        brokers.append(broker)
        return broker

    yield start
    for broker in brokers:
        broker.close()


def _need_zookeeper() -> None:
    if not zookeeper_available():
        pytest.skip("ZooKeeper is not installed (Debian package 'zookeeper' and java)")


@pytest.fixture(scope="module")
def strom_cluster() -> Iterator[EmbeddedCluster]:
    _need_zookeeper()
    with EmbeddedCluster(brokers=3) as cluster:
        yield cluster


@pytest.fixture
def strom_cluster_factory() -> Iterator[Callable[..., EmbeddedCluster]]:
    _need_zookeeper()
    clusters: list[EmbeddedCluster] = []

    def start(brokers: int = 3, **kwargs: Any) -> EmbeddedCluster:
        try:
            cluster = EmbeddedCluster(brokers, **kwargs)
        except NetworkUnavailable as exc:
            pytest.skip(str(exc))
        clusters.append(cluster)
        return cluster.start()

    yield start
    for cluster in clusters:
        cluster.close()


@pytest.fixture(scope="module")
def zookeeper_server() -> Iterator[ZooKeeperServer]:
    """A real standalone ZooKeeper server shared by the tests of a module (skipped where
    java or Debian's ``zookeeper`` package is missing)."""
    _need_zookeeper()
    with ZooKeeperServer() as server:
        yield server


@pytest.fixture
def zookeeper_connect(zookeeper_server: ZooKeeperServer) -> str:
    """A connect string with a chroot of its own for this test: ``127.0.0.1:<port>/t-<hex>``."""
    return f"{zookeeper_server.connect}/t-{uuid.uuid4().hex[:12]}"
