"""``FailureDetector``: which brokers this broker watches for death, and what it does when
one dies (ZooKeeper clusters; the mechanism is :mod:`strom.broker.death_watch`).

* While this broker is the controller it watches every other registered broker; one found
  dead goes to :meth:`ControllerDriver.broker_died` — leadership and ISR membership move at
  once, and its registration is removed.
* Otherwise it watches the controller; a dead controller is deposed
  (:meth:`ControllerElection.depose_dead_controller`, on the store session's worker thread),
  and the election that follows picks a successor, which then watches everyone. The driver
  keeps the death too, so a successor that saw it reconciles without the dead controller the
  moment it is elected.

A broker found dead is one whose inter-broker listener refused
``broker.failure.detection.refusals`` connects in a row, ``broker.failure.detection.interval.ms``
apart (0 refusals: nothing is watched, only ZooKeeper session expiry finds dead brokers).
Without this a killed broker kept its registration, leadership and ISR membership until
its session expired (``zookeeper.session.timeout.ms``, 18 s): acks=all stalled that long on
every partition it replicated.

Lifecycle: built after the broker registered and stood for controller; the targets follow
every metadata image (listener on the store); :meth:`FailureDetector.close` first thing at
stop. Event-loop only, except the deposition, which runs on the session's worker.
"""

from __future__ import annotations

import logging

from strom.broker.death_watch import DeathWatch, Target
from strom.client.security import ClientSecurity
from strom.common.config import BrokerConfig
from strom.controller.driver import ControllerDriver
from strom.controller.election import ControllerElection
from strom.metadata.image import MetadataImage
from strom.metadata.zk_session import ZooKeeperUnavailableError
from strom.metadata.zookeeper import ZooKeeperMetadataStore

log = logging.getLogger("strom.broker.failure_detector")


class FailureDetector:
    """See the module doc."""

    def __init__(self, store: ZooKeeperMetadataStore, node_id: int,
                 election: ControllerElection, driver: ControllerDriver,
                 config: BrokerConfig, security: ClientSecurity | None) -> None:
        self._store = store
        self._node_id = node_id
        self._election = election
        self._driver = driver
        self._watch = DeathWatch(
            node_id, self._died,
            refusals=int(config.get("broker.failure.detection.refusals")),
            interval_s=int(config.get("broker.failure.detection.interval.ms")) / 1000,
            security=security)
        self._unsubscribe = store.subscribe(self._follow)
        self._follow(store.image)

    @property
    def watched(self) -> frozenset[int]:
        """The ids of the brokers watched now."""
        return frozenset(t.node_id for t in self._watch.watched)

    def _follow(self, image: MetadataImage) -> None:
        controller = image.controller_id
        if controller == self._node_id:
            ids = set(image.brokers)
        else:
            ids = {controller} & set(image.brokers)
        ids.discard(self._node_id)
        self._watch.watch({n: Target(n, b.epoch, b.host, b.port)
                           for n, b in image.brokers.items() if n in ids})

    def _died(self, node_id: int, epoch: int) -> None:
        self._driver.broker_died(node_id, epoch)  # acts if controller, else kept for later
        image = self._store.image
        if image.controller_id != self._node_id and node_id == image.controller_id:
            self._store.session.submit(lambda: self._depose(node_id, epoch))

    def _depose(self, controller_id: int, epoch: int) -> None:
        try:
            self._election.depose_dead_controller(controller_id, epoch)
        except ZooKeeperUnavailableError as exc:  # found dead again within a second
            log.warning("cannot depose dead controller %d: %s", controller_id, exc)

    async def close(self) -> None:
        self._unsubscribe()
        await self._watch.close()
