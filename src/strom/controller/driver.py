"""``ControllerDriver``: runs the controller's decisions while this broker is the controller.

Lifecycle: built once per broker on ZooKeeper metadata (:mod:`strom.broker.zookeeper_metadata`)
and subscribed to the store; :meth:`elected` / :meth:`resigned` (any thread) switch it on and
off. While active it re-runs :func:`~strom.controller.decisions.reconcile` on every new image
(brokers registering and going away are image changes), once right after being elected (a
broker may have died while no controller ran), then — when that has nothing to do — the
completion of reassignments whose target replicas joined the ISR
(:func:`~strom.controller.reassignment.progress`), and the preferred-leader rebalance every
``leader.imbalance.check.interval.seconds`` when ``auto.leader.rebalance.enable``.

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
PLAN_ATTEMPTS = 20
STALE_BACKOFF_S = 0.05


class Committer(Protocol):
    """A fenced conditional write from the writer thread (``ControllerElection.commit``)."""

    def commit(self, expected_epoch: int, changes: Sequence[MetadataChange]) -> None: ...


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
        self._shutting_down: set[int] = set()
        self._rebalancer: asyncio.Task[None] | None = None
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

    def live(self, image: MetadataImage) -> set[int]:
        """Registered brokers, less those in a controlled shutdown (not to be given
        leadership)."""
        return set(image.brokers) - self._shutting_down

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
        self._rebalancer = self._loop.create_task(self._rebalance_every(),
                                                  name="leader-rebalance")
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
        return reconcile(image, image.brokers, shutting_down=self.shutting_down(image),
                         unclean=self._unclean_allowed)

    def _reconsider(self) -> None:
        if not self._active or self._writing:
            return
        image = self._store.image
        changes = self.reconcile_plan(image) or progress(image, self.live(image))
        if changes:
            self._submit(image, changes)

    def _submit(self, image: MetadataImage, changes: list[MetadataChange]) -> None:
        self._writing = True
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
        # the new image (ours, or the one that beat us) arrives by the store's watch, which
        # re-runs the decisions; this is the safety net
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
