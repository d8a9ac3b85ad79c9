"""Fixtures for controller tests on a real cluster (see :mod:`tests.controller.cluster`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from strom.metadata.zookeeper import ZooKeeperMetadataStore
from strom.testing.broker import EmbeddedBroker
from strom.testing.pytest_plugin import BrokerFactory
from tests.controller.cluster import start_cluster


@pytest.fixture
def observer(zookeeper_connect: str) -> Iterator[ZooKeeperMetadataStore]:
    """Another ZooKeeper session's view of the cluster's metadata (it writes too)."""
    store = ZooKeeperMetadataStore(zookeeper_connect, timeout=5.0)
    yield store
    store.close()


@pytest.fixture
def cluster(zookeeper_connect: str, strom_broker_factory: BrokerFactory,
            observer: ZooKeeperMetadataStore) -> dict[int, EmbeddedBroker]:
    return start_cluster(zookeeper_connect, strom_broker_factory, observer)
