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

