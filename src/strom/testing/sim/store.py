"""The simulated store node: the in-memory metadata store, broker sessions and the controller.

* **Sessions**: a broker is registered ("live") while its heartbeats arrive; one silent for
  more than ``session_timeout_ms`` (crashed, paused, or cut off from the store) is
  unregistered, as a ZooKeeper session expiring deletes ``/brokers/ids/<id>``. A heartbeat
  from an unregistered broker registers it again (a new session).
* **Controller**: after every new image, the real :func:`~strom.controller.decisions.reconcile`
  runs against it with the registered brokers as live (clean elections only) and its changes
  are written; the controller lives with the store, so it never fails over.
* **ISR writes**: a leader's proposal is written by the real
  :class:`~strom.replication.isr_writer.StoreIsrWriter` planning (leader and epoch still
  current, ISR still the one replaced); a refused one is reported back to the broker, a
  written one is not answered (the image tells). A leader that hears nothing within
  ``request_timeout_ms`` sends the still-pending proposal again (an unknown outcome is never
  taken for a refusal, as in the real writer).
* **Notifications**: every new image is sent to every broker (and again in answer to a
  heartbeat from a broker whose image is older), over the scripted network.
* **Observation**: every change of a partition's (leader, epoch, ISR) is recorded in the
  history as a ``partition-state`` op with a version counter, as the chaos harness records
  ZooKeeper's partition state znodes.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from strom.controller.decisions import reconcile
from strom.metadata.image import BrokerInfo, MetadataImage
from strom.replication.isr_writer import StoreIsrWriter
from strom.replication.partition import IsrChange
from strom.testing.metadata import MemoryMetadataStore
from strom.testing.sim.network import STORE

if TYPE_CHECKING:
    from strom.testing.sim.cluster import Simulation


class StoreNode:
    """See the module docstring."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.store = MemoryMetadataStore(controller_id=STORE)
        self.last_heartbeat: dict[int, int] = {}
        self._states: dict[tuple[str, int], tuple[int, int, tuple[int, ...], int]] = {}
        self._reconcile_due = False
        self.store.subscribe(self._on_image)

    def start(self) -> None:
        self._schedule_session_check()

    # -- sessions ------------------------------------------------------------------------------
    def heartbeat(self, broker: int, incarnation: int) -> None:
        self.last_heartbeat[broker] = self.sim.clock.now_ms()
        if broker not in self.store.image.brokers:
            self.store.register_broker(BrokerInfo(broker, "sim", 9000 + broker))
        else:
            self._send_image(broker, self.store.image)

    def _schedule_session_check(self) -> None:
        self.sim.scheduler.call_later(self.sim.tick_ms * 5, self._session_check)

    def _session_check(self) -> None:
        self._schedule_session_check()
        now = self.sim.clock.now_ms()
        for broker in sorted(self.store.image.brokers):
            if now - self.last_heartbeat.get(broker, now) > self.sim.session_timeout_ms:
                self.store.unregister_broker(broker)

    # -- the controller -----------------------------------------------------------------------
    def _on_image(self, image: MetadataImage) -> None:
        self._observe(image)
        for broker in self.sim.brokers:
            self._send_image(broker, image)
        if not self._reconcile_due:
            self._reconcile_due = True
            self.sim.scheduler.call_later(0, self._reconcile)

    def _reconcile(self) -> None:
        self._reconcile_due = False
        image = self.store.image
        changes = reconcile(image, set(image.brokers))
        if changes:
            self.store.write(image.epoch, changes)

    def write_isr(self, broker: int, incarnation: int, change: IsrChange) -> None:
        writer = StoreIsrWriter(self.store, broker, lambda _: None, attempts=1)
        written: list[tuple[IsrChange, int]] = []
        # the real planning, synchronously (no thread here)
        failed = writer._write([change], written)
        target = self.sim.brokers[broker]
        for refused in failed:
            self.sim.net.send(STORE, broker, partial(target.isr_change_failed, incarnation,
                                                     refused))
        for done, epoch in written:
            self.sim.net.send(STORE, broker, partial(target.isr_change_written, incarnation,
                                                     done, epoch))

    def _send_image(self, broker: int, image: MetadataImage) -> None:
        target = self.sim.brokers[broker]
        self.sim.net.send(STORE, broker, lambda: target.on_image(image))

    def _observe(self, image: MetadataImage) -> None:
        for topic in image.topics.values():
            for p in topic.partitions:
                key = (topic.name, p.partition)
                old = self._states.get(key)
                if old is not None and old[:3] == (p.leader, p.leader_epoch, p.isr):
                    continue
                version = old[3] + 1 if old is not None else 0
                self._states[key] = (p.leader, p.leader_epoch, p.isr, version)
                self.sim.history.event("zookeeper", "ok", "partition-state", {
                    "partition": p.partition, "leader": p.leader,
                    "leader_epoch": p.leader_epoch, "isr": list(p.isr), "version": version})
