"""The metadata-store seam: what the broker and the controller need from cluster metadata.

Implementations: :class:`strom.metadata.local.LocalMetadataStore` (single node, one JSON file,
the default), :class:`strom.metadata.zookeeper.ZooKeeperMetadataStore` (a cluster's, in
ZooKeeper) and :class:`strom.testing.metadata.MemoryMetadataStore` (in memory, for tests and
simulations). ``tests/metadata/test_store_contract.py`` runs the same scenarios against each.

Contract, for every implementation:

* ``image`` is the current :class:`MetadataImage`; an image never changes once handed out.
  Every change of the image (a write, a broker registration) makes a new one with
  ``epoch + 1``.
* ``write(expected_epoch, changes)`` is a compare-and-set: it applies all of ``changes`` or none,
  and raises :class:`StaleMetadataError` (changing nothing) when ``image.epoch`` is no longer
  ``expected_epoch``; callers re-read the image, re-validate and retry. It returns once the new
  image is durable (for stores that persist), then notifies the listeners. An empty ``changes``
  returns the current image and notifies nobody.
* ``subscribe(listener)`` calls ``listener(image)`` with each new image, in epoch order, after
  the change is durable; not with the image current at subscription. The returned callable
  unsubscribes (idempotent; takes effect at once, even during a notification). A listener may
  write: its image is delivered to every listener after the current one has been delivered to
  all. A listener that raises is logged and does not stop the others.
* ``allocate_producer_id_block(size)`` reserves ``size`` producer ids never handed out before,
  not even before a restart or crash: durable before it returns. It does not change the image.

Not thread-safe: one owner (the broker's event-loop thread) calls every method.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from strom.common.errors import StromError
from strom.metadata.changes import MetadataChange, apply_changes
from strom.metadata.image import BrokerInfo, MetadataImage

log = logging.getLogger("strom.metadata")

MetadataListener = Callable[[MetadataImage], None]
MAX_PRODUCER_ID = 2**63 - 1


class StaleMetadataError(StromError):
    """A conditional write expected an image epoch that is no longer current."""

    def __init__(self, expected_epoch: int, current_epoch: int) -> None:
        super().__init__(
            f"metadata write expected epoch {expected_epoch} but the image is at epoch "
            f"{current_epoch}: re-read the image and retry")
        self.expected_epoch = expected_epoch
        self.current_epoch = current_epoch


class ProducerIdsExhaustedError(StromError):
    """No block of the requested size fits below the largest producer id (2**63 - 1)."""


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """Producer ids ``first .. first + size - 1``, reserved for one broker."""

    first: int
    size: int

    @property
    def last(self) -> int:
        return self.first + self.size - 1


class MetadataStore(Protocol):
    """Cluster metadata: the current image, conditional writes, notifications, producer ids."""

    @property
    def image(self) -> MetadataImage: ...

    @property
    def cluster_id(self) -> str: ...

    def register_broker(self, broker: BrokerInfo) -> None:
        """Add or update a live broker (its address and rack); makes a new image."""
        ...

    def write(self, expected_epoch: int, changes: Sequence[MetadataChange]) -> MetadataImage:
        """Apply ``changes`` atomically if the image is still at ``expected_epoch``."""
        ...

    def subscribe(self, listener: MetadataListener) -> Callable[[], None]:
        """Call ``listener`` with every new image; returns the unsubscribe callable."""
        ...

    def allocate_producer_id_block(self, size: int) -> ProducerIdBlock:
        """Reserve ``size`` never-used producer ids, durably."""
        ...


def next_producer_id_block(next_id: int, size: int) -> ProducerIdBlock:
    """The block starting at ``next_id`` (the lowest id never reserved), checked."""
    if size < 1:
        raise ValueError(f"a producer id block needs a positive size, got {size}")
    if next_id + size - 1 > MAX_PRODUCER_ID:
        raise ProducerIdsExhaustedError(
            f"cannot reserve {size} producer ids from {next_id}: past {MAX_PRODUCER_ID}")
    return ProducerIdBlock(next_id, size)


class Listeners:
    """The listener list of a store, with the delivery rules of the module doc."""

    def __init__(self) -> None:
        self._listeners: dict[int, MetadataListener] = {}
        self._next_token = 0
        self._pending: list[MetadataImage] = []
        self._delivering = False

    def subscribe(self, listener: MetadataListener) -> Callable[[], None]:
        token = self._next_token
        self._next_token += 1
        self._listeners[token] = listener

        def unsubscribe() -> None:
            self._listeners.pop(token, None)

        return unsubscribe

    def publish(self, image: MetadataImage) -> None:
        """Deliver ``image`` to every listener (queued behind any delivery in progress)."""
        self._pending.append(image)
        if self._delivering:
            return
        self._delivering = True
        try:
            while self._pending:
                current = self._pending.pop(0)
                for token, listener in list(self._listeners.items()):
                    if token not in self._listeners:
                        continue  # unsubscribed by an earlier listener
                    try:
                        listener(current)
                    except Exception:
                        log.exception("metadata listener %r failed on epoch %d", listener,
                                      current.epoch)
        finally:
            self._delivering = False


class ImageStore:
    """What every :class:`MetadataStore` implementation shares: the current image, conditional
    writes, listeners and producer-id blocks. A subclass persists in :meth:`_store` (which
    must change nothing if it raises) and registers brokers its own way, installing the new
    image with :meth:`_set_image`."""

    def __init__(self, image: MetadataImage, next_producer_id: int) -> None:
        self._image = image
        self._next_producer_id = next_producer_id
        self._listeners = Listeners()

    @property
    def image(self) -> MetadataImage:
        return self._image

    @property
    def cluster_id(self) -> str:
        return self._image.cluster_id

    def write(self, expected_epoch: int, changes: Sequence[MetadataChange]) -> MetadataImage:
        self._finish_pending()
        if expected_epoch != self._image.epoch:
            raise StaleMetadataError(expected_epoch, self._image.epoch)
        if not changes:
            return self._image
        image = apply_changes(self._image, changes)
        self._store(image, self._next_producer_id)
        self._set_image(image)
        return image

    def subscribe(self, listener: MetadataListener) -> Callable[[], None]:
        return self._listeners.subscribe(listener)

    def allocate_producer_id_block(self, size: int) -> ProducerIdBlock:
        self._finish_pending()
        block = next_producer_id_block(self._next_producer_id, size)
        self._store(self._image, block.last + 1)
        self._next_producer_id = block.last + 1
        return block

    def _store(self, image: MetadataImage, next_producer_id: int) -> None:
        raise NotImplementedError

    def _finish_pending(self) -> None:
        """Complete a write still in progress off the event loop (a subclass that has them),
        before anything reads the image to change it."""

    def _set_image(self, image: MetadataImage) -> None:
        self._image = image
        self._listeners.publish(image)
