"""Controller election through ZooKeeper, with epoch fencing (Kafka's ZooKeeper-mode scheme).

The controller is whoever holds the ephemeral ``/controller`` znode
(``{"version":1,"brokerid":N,…}``). A broker becomes controller with one multi-op that
creates ``/controller`` *and* sets ``/controller_epoch`` (the epoch in decimal) to the next
epoch, checked against the znode version it read — so each election gets a new epoch and
two candidates cannot both win with the same one. The winner keeps the version it wrote as
its :class:`~strom.metadata.zookeeper.ControllerFence`; every controller write
(:meth:`ControllerElection.write`) checks it in the same multi-op, so a controller that was
paused or cut off while another was elected has its writes refused (``NOT_CONTROLLER``) even
before it notices that it lost.

A broker found dead by its listener (:mod:`strom.broker.death_watch`: its port refuses
connections) need not wait for its ZooKeeper session to expire. The controller deletes its
registration (:meth:`ControllerElection.remove_dead_broker`, in a multi-op fenced by the
controller epoch, only while ``/brokers/ids/<id>`` is still the registration of the broker
epoch found dead); a dead controller is deposed by any other broker
(:meth:`ControllerElection.depose_dead_controller`): ``/controller`` deleted in a multi-op
checked against the ``/controller_epoch`` version read with it — an election in between
changes that version, so a successor is never deposed — and only when ``/controller``
belongs to the ZooKeeper session of the registration found dead. The watches then run the
next election at once, and the successor finds the dead broker for itself. Being wrong costs
availability, never data: a live broker whose registration vanished registers again (a new
broker epoch, see :mod:`strom.metadata.zookeeper`), a live controller deposed stands again,
and writes stay fenced by leader and controller epochs.

Lifecycle: :meth:`ControllerElection.start` runs for election once and watches
``/controller``; when the znode goes (the controller's session ended or it resigned) every
candidate runs again. ``on_elected(epoch)`` and ``on_resigned()`` run on the store session's
worker thread; ``on_resigned`` runs when this broker's session was lost or ``/controller``
changed hands, and when :meth:`ControllerElection.resign` is called.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Sequence

from kazoo.exceptions import BadVersionError, NodeExistsError
from kazoo.protocol.states import EventType, WatchedEvent

from strom.metadata import zk_layout as zk
from strom.metadata.changes import MetadataChange
from strom.metadata.image import MetadataImage
from strom.metadata.zk_session import TransactionFailedError
from strom.metadata.zookeeper import ControllerFence, NotControllerError, ZooKeeperMetadataStore

log = logging.getLogger("strom.controller.election")

#: The epoch ``/controller_epoch`` holds before the first election (the first controller
#: gets epoch 1, as in Kafka).
INITIAL_EPOCH = 0


class ControllerElection:
    """Broker ``broker_id``'s candidacy, on ``store``'s session. Thread-safe."""

    def __init__(self, store: ZooKeeperMetadataStore, broker_id: int, *,
                 on_elected: Callable[[int], None] = lambda epoch: None,
                 on_resigned: Callable[[], None] = lambda: None) -> None:
        self._store = store
        self._session = store.session
        self.broker_id = broker_id
        self._on_elected = on_elected
        self._on_resigned = on_resigned
        self._lock = threading.RLock()
        self._fence: ControllerFence | None = None
        self._started = False
        self._standing = False

    @property
    def fence(self) -> ControllerFence | None:
        """This broker's claim while it believes it is the controller, else None."""
        return self._fence

    @property
    def is_controller(self) -> bool:
        return self._fence is not None

    def start(self) -> None:
        """Stand for election now and whenever the controller goes."""
        with self._lock:
            self._standing = True
            if not self._started:
                self._started = True
                self._session.on_new_session(self._session_replaced)
                self._session.on_connected(self._elect)
        self._elect()

    def write(self, expected_epoch: int, changes: Sequence[MetadataChange]) -> MetadataImage:
        """A metadata write fenced by this controller's epoch (``NOT_CONTROLLER`` when this
        broker is not, or no longer, the controller)."""
        fence = self._fence
        if fence is None:
            raise NotControllerError(f"broker {self.broker_id} is not the controller")
        try:
            return self._store.write(expected_epoch, changes, fence=fence)
        except NotControllerError:
            self._lost(fence)
            raise

    def commit(self, expected_epoch: int, changes: Sequence[MetadataChange]) -> None:
        """:meth:`write` from a thread other than the store's owner (see
        :meth:`ZooKeeperMetadataStore.commit`): the new image arrives by the owner's refresh."""
        fence = self._fence
        if fence is None:
            raise NotControllerError(f"broker {self.broker_id} is not the controller")
        try:
            self._store.commit(expected_epoch, changes, fence=fence)
        except NotControllerError:
            self._lost(fence)
            raise

    def remove_dead_broker(self, broker_id: int, epoch: int) -> bool:
        """Delete ``/brokers/ids/<broker_id>`` of a broker found dead, if it still is the
        registration of broker ``epoch`` (its czxid) and this broker still the controller
        (``NOT_CONTROLLER`` otherwise); True when deleted. Blocks on ZooKeeper: call it from
        a thread other than the event loop's."""
        fence = self._fence
        if fence is None:
            raise NotControllerError(f"broker {self.broker_id} is not the controller")
        session = self._session
        path = zk.broker_path(broker_id)
        found = session.get_or_none(path)
        if found is None or found[1].czxid != epoch:
            return False  # gone already, or a new incarnation registered
        tx = session.transaction()
        tx.check(zk.CONTROLLER_EPOCH, fence.zk_version)
        tx.delete(path, version=found[1].version)
        try:
            session.commit(tx, f"remove the registration of dead broker {broker_id}")
        except TransactionFailedError as e:
            if e.index == 0:
                self._lost(fence)
                raise NotControllerError(
                    f"controller epoch {fence.epoch} is no longer current") from None
            return False  # changed meanwhile
        log.warning("broker %d (epoch %d) found dead: its registration is removed",
                    broker_id, epoch)
        return True

    def depose_dead_controller(self, controller_id: int, epoch: int) -> bool:
        """Delete ``/controller`` of controller ``controller_id``, found dead at broker
        ``epoch``, so that the next election starts now (see the module doc); True when
        deposed. Blocks on ZooKeeper (call it from the session's worker)."""
        session = self._session
        current = session.get_or_none(zk.CONTROLLER)
        epoch_node = session.get_or_none(zk.CONTROLLER_EPOCH)
        registration = session.get_or_none(zk.broker_path(controller_id))
        if (current is None or epoch_node is None or registration is None
                or zk.decode_controller(current[0]) != controller_id
                or registration[1].czxid != epoch
                or registration[1].ephemeralOwner != current[1].ephemeralOwner):
            return False  # not (or no longer) the controller found dead
        tx = session.transaction()
        tx.check(zk.CONTROLLER_EPOCH, epoch_node[1].version)
        tx.delete(zk.CONTROLLER, version=current[1].version)
        try:
            session.commit(tx, f"depose dead controller {controller_id}")
        except TransactionFailedError:
            return False  # another broker deposed it first, or an election ran meanwhile
        log.warning("controller %d (broker epoch %d) found dead: deposed", controller_id,
                    epoch)
        return True

    def withdraw(self) -> None:
        """Stand no more (a stopping broker), keeping the controllership while it lasts: if
        ``/controller`` goes — deposed, see :meth:`depose_dead_controller` — this broker
        does not take it back."""
        with self._lock:
            self._standing = False

    def resign(self) -> None:
        """Stop standing for election and give up the controllership (a controlled shutdown):
        delete ``/controller`` if it is still ours; the other candidates elect one of them.
        :meth:`start` stands again."""
        with self._lock:
            self._standing = False
            fence = self._fence
            if fence is None:
                return
            tx = self._session.transaction()
            tx.check(zk.CONTROLLER_EPOCH, fence.zk_version)
            tx.delete(zk.CONTROLLER)
            with contextlib.suppress(TransactionFailedError):  # another one is controller
                self._session.commit(tx, "resign the controllership")
            self._lost(fence)

    def _elect(self) -> None:
        """One attempt: win the election, or watch ``/controller`` for the next one. The
        callbacks run after the lock is released (they may call into the store)."""
        with self._lock:
            won = self._attempt()
        if won is not None:
            log.info("broker %d is the controller, epoch %d", self.broker_id, won)
            self._on_elected(won)

    def _attempt(self) -> int | None:
        """The epoch won, or None (someone else is controller, or this broker stands no
        more); a controllership this broker believed it held and does not is given up."""
        session = self._session
        while self._standing:
            current = session.get_or_none(zk.CONTROLLER, self._controller_changed)
            if current is not None:
                fence = self._fence
                session_id = (session.client.client_id or (None,))[0]
                if fence is not None and (zk.decode_controller(current[0]) != self.broker_id
                                          or current[1].owner_session_id != session_id):
                    self._session.submit(functools.partial(self._lost, fence))
                return None
            if session.exists(zk.CONTROLLER, self._controller_changed) is not None:
                continue  # created between the two reads
            epoch_node = session.get_or_none(zk.CONTROLLER_EPOCH)
            if epoch_node is None:
                with contextlib.suppress(NodeExistsError):
                    session.wait(session.client.create_async(
                        zk.CONTROLLER_EPOCH, str(INITIAL_EPOCH).encode()),
                        "create /controller_epoch")
                continue
            epoch = int(epoch_node[0].decode()) + 1
            tx = session.transaction()
            tx.create(zk.CONTROLLER, zk.encode_controller(self.broker_id), ephemeral=True)
            tx.set_data(zk.CONTROLLER_EPOCH, str(epoch).encode(), version=epoch_node[1].version)
            try:
                results = session.commit(tx, "the controller election")
            except TransactionFailedError as e:
                if isinstance(e.error, (NodeExistsError, BadVersionError)):
                    continue  # another candidate won this round: watch it
                raise
            self._fence = ControllerFence(epoch, results[1].version)
            return epoch
        fence = self._fence  # standing no more (withdrawn): a controllership that ended ends
        if fence is not None:
            current = session.get_or_none(zk.CONTROLLER)
            session_id = (session.client.client_id or (None,))[0]
            if current is None or zk.decode_controller(current[0]) != self.broker_id \
                    or current[1].owner_session_id != session_id:
                self._session.submit(functools.partial(self._lost, fence))
        return None

    def _controller_changed(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE:
            self._session.submit(self._elect)

    def _session_replaced(self) -> None:
        """The session expired: its ``/controller`` is gone with it."""
        fence = self._fence
        if fence is not None:
            self._lost(fence)

    def _lost(self, fence: ControllerFence) -> None:
        with self._lock:
            if self._fence != fence:
                return
            self._fence = None
        log.info("broker %d is no longer the controller (epoch %d)", self.broker_id,
                 fence.epoch)
        self._on_resigned()

