"""An in-memory metadata store: the twin of the file-backed and ZooKeeper stores, for tests.

    store = MemoryMetadataStore()
    store.register_broker(BrokerInfo(0, "127.0.0.1", 9092))
    admin = TopicAdmin(store, BrokerConfig())

It follows the :class:`strom.metadata.store.MetadataStore` contract exactly (the contract tests
run against it), keeps nothing across processes, and adds what simulations need: several
brokers (each ``register_broker`` adds one), :meth:`MemoryMetadataStore.unregister_broker` (a
broker's session ending) and :meth:`MemoryMetadataStore.fail_next_write` (a store that cannot
persist). Single-threaded, like the stores it stands in for.
"""

from __future__ import annotations

import dataclasses

from strom.metadata.image import BrokerInfo, MetadataImage
from strom.metadata.local import new_cluster_id
from strom.metadata.store import ImageStore


class MemoryMetadataStore(ImageStore):
    """Cluster metadata in memory.

    ``controller_id`` is reported in images as given; when None, the lowest registered broker id
    stands in for the elected controller (-1 while no broker is registered)."""

    def __init__(self, cluster_id: str | None = None, *, controller_id: int | None = None) -> None:
        self._controller_id = controller_id
        self._failure: BaseException | None = None
        super().__init__(MetadataImage(cluster_id or new_cluster_id(), 0,
                                       self._controller(set()), {}, {}), 0)

    def register_broker(self, broker: BrokerInfo) -> None:
        brokers = dict(self._image.brokers)
        brokers[broker.node_id] = broker
        self._set_brokers(brokers)

    def unregister_broker(self, node_id: int) -> None:
        """The broker's registration ends (shutdown or session expiry); partitions untouched."""
        brokers = dict(self._image.brokers)
        if brokers.pop(node_id, None) is not None:
            self._set_brokers(brokers)

    def fail_next_write(self, error: BaseException) -> None:
        """The next ``write`` or ``allocate_producer_id_block`` that would succeed raises
        ``error`` instead, changing nothing (as a store whose disk or session failed)."""
        self._failure = error

    def _store(self, image: MetadataImage, next_producer_id: int) -> None:
        """Nothing to persist; an injected failure is raised here, before any change."""
        self._take_failure()

    def _take_failure(self) -> None:
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def _controller(self, broker_ids: set[int]) -> int:
        if self._controller_id is not None:
            return self._controller_id
        return min(broker_ids, default=-1)

    def _set_brokers(self, brokers: dict[int, BrokerInfo]) -> None:
        old = self._image
        self._set_image(dataclasses.replace(
            old, epoch=old.epoch + 1, controller_id=self._controller(set(brokers)),
            brokers=brokers))
