"""A broker on ZooKeeper metadata: ``zookeeper.connect`` set selects the
:class:`~strom.metadata.zookeeper.ZooKeeperMetadataStore` instead of the metadata file in the
data directory (the default, which needs no ZooKeeper).

For now this is one broker against ZooKeeper: the store, the broker's ephemeral registration
and its candidacy for controller (it wins alone). Several brokers on one chroot share the
metadata but nothing replicates yet (issue 9). The store's watch reactions run on the
broker's event loop (``run=loop.call_soon_threadsafe``), like everything else that touches
the image; each ZooKeeper call is bounded by ``zookeeper.connection.timeout.ms``.
"""

from __future__ import annotations

import asyncio
import logging

from strom.common.config import BrokerConfig
from strom.controller.election import ControllerElection
from strom.metadata.zookeeper import ZooKeeperMetadataStore

log = logging.getLogger("strom.broker")


def zookeeper_connect(config: BrokerConfig) -> str | None:
    """The connect string (``host:port[,…][/chroot]``), or None: the file-backed store."""
    connect = config.get("zookeeper.connect")
    return str(connect) if connect else None


def open_store(config: BrokerConfig, connect: str) -> ZooKeeperMetadataStore:
    """Connect (raises ZooKeeperUnavailableError when ZooKeeper does not answer in time)."""
    return ZooKeeperMetadataStore(
        connect, timeout=int(config.get("zookeeper.connection.timeout.ms")) / 1000,
        session_timeout=int(config.get("zookeeper.session.timeout.ms")) / 1000,
        run=asyncio.get_running_loop().call_soon_threadsafe)


def stand_for_controller(store: ZooKeeperMetadataStore, node_id: int) -> ControllerElection:
    """Start this broker's candidacy; once elected its image names it controller at once."""
    def elected(epoch: int) -> None:
        log.info("broker %d elected controller (controller epoch %d)", node_id, epoch)
        store.refresh()

    election = ControllerElection(store, node_id, on_elected=elected)
    election.start()
    return election
