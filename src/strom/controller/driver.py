"""``ControllerDriver``: runs the controller's decisions while this broker is the controller.

Lifecycle: built once per broker on ZooKeeper metadata (:mod:`strom.broker.zookeeper_metadata`)
and subscribed to the store; :meth:`elected` / :meth:`resigned` (any thread) switch it on and
off. While active it re-runs :func:`~strom.controller.decisions.reconcile` on every new image
(brokers registering and going away are image changes), once right after being elected (a
broker may have died while no controller ran), then — when that has nothing to do — the
completion of reassignments whose target replicas joined the ISR
(:func:`~strom.controller.reassignment.progress`), and the preferred-leader rebalance every
``leader.imbalance.check.interval.seconds`` when ``auto.leader.rebalance.enable``.

Dead brokers: a broker counts as live while it is registered, unless :meth:`broker_died`
reported that registration (its broker epoch) dead — its listener refuses connections
(:mod:`strom.broker.death_watch`). It then leaves leadership and ISRs at once, as on a session
expiry. Its registration is removed (fenced, on the writer thread) when it is reported again
:data:`REGISTRATION_GRACE_S` or more after it was first found dead (the death watch repeats
the report every second while the port refuses): a restart need not wait for the session to
expire, and brokers and clients stop naming it. Not at once, because a client that sees a
broker leave Metadata while it is still moving a partition away from it loses the partition's
new leader (librdkafka 2.16 decommissions the broker and sends the partition back to "leader
unknown" until its next one-second scan: measured, acks=all resumed about a second later).
A new registration of the id (a restart) is live again. Deaths reported while this broker
is not the controller are kept, and count from its election on.

Threads: everything here runs on the broker's event loop, except the ZooKeeper writes, which
go to one writer thread (:meth:`ControllerElection.commit`, fenced by the controller epoch),
so the loop never waits on ZooKeeper and the controller's writes are serialised. A write
does not install the image: the store's watch refresh brings it to the loop, which runs the
decisions again (they are idempotent). A write that lost a race (``StaleMetadataError``) is
re-planned against the next image; a deposed controller's (``NOT_CONTROLLER``) is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

from strom.common.config import BrokerConfig, TopicConfig
from strom.controller.decisions import ElectionType, elect_leaders, imbalanced, reconcile
from strom.controller.reassignment import progress
from strom.metadata.changes import MetadataChange
from strom.metadata.image import MetadataImage, TopicInfo
from strom.metadata.store import MetadataStore, StaleMetadataError
from strom.metadata.zk_session import ZooKeeperUnavailableError
from strom.metadata.zookeeper import NotControllerError

log = logging.getLogger("strom.controller")
T = TypeVar("T")

#: Re-run the decisions this long after a write even if no new image arrived (a lost watch).
SAFETY_RECHECK_S = 1.0
#: A dead broker's registration is removed no sooner than this after it was found dead.
REGISTRATION_GRACE_S = 2.0
PLAN_ATTEMPTS = 20
STALE_BACKOFF_S = 0.05


class Committer(Protocol):
    """A fenced conditional write from the writer thread (``ControllerElection.commit``)."""

    def commit(self, expected_epoch: int, changes: Sequence[MetadataChange]) -> None: ...

    def remove_dead_broker(self, broker_id: int, epoch: int) -> bool: ...


class ControllerDriver:
    """See the module doc. Event-loop thread, except :meth:`elected` / :meth:`resigned`."""

    def __init__(self, store: MetadataStore, committer: Committer,
                 config: Callable[[], BrokerConfig],
                 topic_config: Callable[[str], TopicConfig]) -> None:
        self._store = store
        self._committer = committer
        self._config = config
        self._topic_config = topic_config
        self._loop = asyncio.get_running_loop()
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="strom-controller")
        self._active = False
        self._writing = False
        self._written_from = -1  # the image epoch the write in flight was planned against
        self._shutting_down: set[int] = set()
        #: broker id → (the broker epoch found dead, when: loop time), until the registration
        #: changes
        self._dead: dict[int, tuple[int, float]] = {}
        self._rebalancer: asyncio.Task[None] | None = None
        #: The last image the decisions found nothing to do in, with the brokers alive and
        #: shutting down then.
        self._settled: tuple[MetadataImage, frozenset[int], frozenset[int]] | None = None
        self._unsubscribe = store.subscribe(lambda image: self._reconsider())

    @property
    def active(self) -> bool:
        return self._active

    def elected(self, epoch: int = 0) -> None:
        self._loop.call_soon_threadsafe(self._activate)

    def resigned(self) -> None:
        self._loop.call_soon_threadsafe(self._deactivate)

    def close(self) -> None:
        self._unsubscribe()
        self._deactivate()
        self._writer.shutdown(wait=False, cancel_futures=True)

    # -- what handlers ask of the controller ------------------------------------------------

    def alive(self, image: MetadataImage) -> set[int]:
        """Registered brokers, less those found dead (:meth:`broker_died`)."""
        for broker, (epoch, _found) in list(self._dead.items()):
            info = image.brokers.get(broker)
            if info is None or info.epoch != epoch:
                del self._dead[broker]  # its registration is gone (or a new one came)
        return set(image.brokers) - self._dead.keys()

    def live(self, image: MetadataImage) -> set[int]:
        """Brokers alive, less those in a controlled shutdown (not to be given
        leadership)."""
        return self.alive(image) - self._shutting_down

    def broker_died(self, broker: int, epoch: int) -> None:
        """Broker ``broker``'s registration of broker ``epoch`` belongs to a dead process:
        reconcile without it now; reported again after :data:`REGISTRATION_GRACE_S`, remove
        the registration (both fenced writes). A report while this broker is not the
        controller is kept (a dead process stays dead): elected later — typically because
        the dead broker was the controller — it reconciles without it at once."""
        info = self._store.image.brokers.get(broker)
        if info is None or info.epoch != epoch:
            return
        found = self._dead.get(broker)
        if found is None or found[0] != epoch:
            self._dead[broker] = (epoch, self._loop.time())
            if self._active:
                log.warning("controller: broker %d (epoch %d) is dead; moving its leadership "
                            "and removing it from ISRs", broker, epoch)
                self._reconsider()
        elif self._active and self._loop.time() - found[1] >= REGISTRATION_GRACE_S:
            future = self._loop.run_in_executor(
                self._writer, self._committer.remove_dead_broker, broker, epoch)
            future.add_done_callback(self._removed)

    def _removed(self, future: asyncio.Future[bool]) -> None:
        if not future.cancelled() and (error := future.exception()) is not None and \
                not isinstance(error, NotControllerError):
            log.warning("controller: cannot remove a dead broker's registration (retried "
                        "while it is still found dead): %s", error)

    def shutting_down(self, image: MetadataImage) -> set[int]:
        self._shutting_down &= set(image.brokers)  # gone: its shutdown is over
        return set(self._shutting_down)

    def begin_shutdown(self, broker: int) -> None:
        """``broker`` asked for a controlled shutdown: it leads and follows no more where
        others can (:func:`reconcile` with it shutting down)."""
        self._shutting_down.add(broker)

    async def update(self, plan: Callable[[MetadataImage], tuple[list[MetadataChange], T]]
                     ) -> T:
        """Plan against the current image and commit (fenced) from the writer thread,
        re-planning when the image moved; the result of the plan that was written.
        ``NOT_CONTROLLER`` when this broker is not (or no longer) the controller."""
        for _ in range(PLAN_ATTEMPTS):
            if not self._active:
                raise NotControllerError("this broker is not the controller")
            image = self._store.image
            changes, result = plan(image)
            if not changes:
                return result
            try:
                await self._loop.run_in_executor(self._writer, self._committer.commit,
                                                 image.epoch, changes)
            except StaleMetadataError:
                await self._next_image(image)
                continue
            await self._next_image(image)
            return result
        raise ZooKeeperUnavailableError("the metadata kept changing under the controller")

    async def _next_image(self, image: MetadataImage, timeout: float = SAFETY_RECHECK_S
                          ) -> None:
        """Wait (briefly) until the store holds an image newer than ``image``."""
        deadline = self._loop.time() + timeout
        while self._store.image is image and self._loop.time() < deadline:
            await asyncio.sleep(STALE_BACKOFF_S)

    # -- the loop of decisions ----------------------------------------------------------------

    def _activate(self) -> None:
        if self._active:
            return
        self._active = True
        self._settled = None
        self._rebalancer = self._loop.create_task(self._rebalance_every(),
                                                  name="leader-rebalance")
        image = self._store.image
        if dead := set(image.brokers) - self.alive(image):
            log.warning("controller: brokers %s were found dead before this election; "
                        "moving their leadership and removing them from ISRs", sorted(dead))
        self._reconsider()  # reconcile everything once: failures while nobody was controller

    def _deactivate(self) -> None:
        self._active = False
        self._shutting_down.clear()
        if self._rebalancer is not None:
            self._rebalancer.cancel()
            self._rebalancer = None

    def _unclean_allowed(self, topic: TopicInfo) -> bool:
        return bool(self._topic_config(topic.name).get("unclean.leader.election.enable"))

    def reconcile_plan(self, image: MetadataImage) -> list[MetadataChange]:
        """:func:`reconcile` against ``image`` with this controller's view of who is
        shutting down and the topics' unclean-election policy."""
        return reconcile(image, self.alive(image), shutting_down=self.shutting_down(image),
                         unclean=self._unclean_allowed)

    def _reconsider(self) -> None:
        if not self._active or self._writing:
            return
        image = self._store.image
        alive = self.alive(image)
        shutting_down = self.shutting_down(image)
        considered = self._since_settled(image, alive, shutting_down)
        changes = (reconcile(considered, alive, shutting_down=shutting_down,
                             unclean=self._unclean_allowed)
                   or progress(considered, self.live(image)))
        if changes:
            self._submit(image, changes)
        else:
            self._settled = (image, frozenset(alive), frozenset(shutting_down))

    def _since_settled(self, image: MetadataImage, alive: set[int],
                       shutting_down: set[int]) -> MetadataImage:
        """What the decisions must look at: only the topics changed since the last image on
        which they had nothing to do, while the same brokers are alive (registered and not
        reported dead) and shutting down (a topic nothing changed in stays settled); else
        everything. Keeps each new image from costing a walk over every partition."""
        settled = self._settled
        if (settled is None or settled[1] != alive
                or settled[2] != shutting_down):
            return image
        before = settled[0].topics
        return dataclasses.replace(image, topics={
            n: t for n, t in image.topics.items() if before.get(n) is not t})

    def _submit(self, image: MetadataImage, changes: list[MetadataChange]) -> None:
        self._writing = True
        self._written_from = image.epoch
        log.info("controller: %s", "; ".join(map(str, changes)))
        future = self._loop.run_in_executor(self._writer, self._committer.commit, image.epoch,
                                            changes)
        future.add_done_callback(self._written)

    def _written(self, future: asyncio.Future[None]) -> None:
        self._writing = False
        if future.cancelled():
            return
        error = future.exception()
        if isinstance(error, NotControllerError):
            return  # resigned() follows
        if error is not None and not isinstance(error, StaleMetadataError):
            log.warning("controller write failed (retrying): %s", error)
        if self._store.image.epoch != self._written_from:
            # a newer image arrived while writing (its listener call found us busy)
            self._reconsider()
        # otherwise the new image (ours, or the one that beat us) arrives by the store's
        # watch, which re-runs the decisions; this is the safety net
        self._loop.call_later(SAFETY_RECHECK_S, self._reconsider)

    async def _rebalance_every(self) -> None:
        while True:
            config = self._config()
            await asyncio.sleep(float(config.get("leader.imbalance.check.interval.seconds")))
            if not config.get("auto.leader.rebalance.enable"):
                continue
            with contextlib.suppress(StaleMetadataError, NotControllerError,
                                     ZooKeeperUnavailableError):
                await self.update(self._plan_rebalance)

    def _plan_rebalance(self, image: MetadataImage) -> tuple[list[MetadataChange], None]:
        live = self.live(image)
        due = imbalanced(image, live,
                         int(self._config().get("leader.imbalance.per.broker.percentage")))
        if not due:
            return [], None
        log.info("controller: preferred leader election for %d imbalanced partitions",
                 len(due))
        return elect_leaders(image, live, ElectionType.PREFERRED, due).changes, None
