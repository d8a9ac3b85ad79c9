"""Metadata images delivered on the event loop, newest last.

A store publishes each new image from the thread that made it: the event loop for watches
and the broker's own writes, a worker thread for the writes the broker runs off the loop
(ISR changes, :mod:`strom.replication.isr_writer`). :class:`ImageRelay` is the store's one
subscriber for the broker's listeners: an image published on the loop thread is delivered at
once; one published elsewhere is handed to the loop (``call_soon_threadsafe``). Images are
whole states, so one older than the last delivered is skipped (a thread's image may reach
the loop after a newer one the loop made itself).

Lifecycle: created on the event loop by the broker server and subscribed to the store;
listeners run on the event loop only.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from strom.metadata.image import MetadataImage

Listener = Callable[[MetadataImage], None]


class ImageRelay:
    """See the module docstring."""

    def __init__(self, loop: asyncio.AbstractEventLoop, delivered_epoch: int) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._delivered = delivered_epoch
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def __call__(self, image: MetadataImage) -> None:
        if threading.get_ident() == self._loop_thread:
            self._deliver(image)
        else:
            self._loop.call_soon_threadsafe(self._deliver, image)

    def _deliver(self, image: MetadataImage) -> None:
        if image.epoch <= self._delivered:
            return
        self._delivered = image.epoch
        for listener in self._listeners:
            listener(image)
