"""Producer interceptors, as Java's ``ProducerInterceptor``.

An interceptor sees every record twice:

- ``on_send(record) -> record`` in ``send()``, before the key and value are serialized and
  the partition is chosen; it may return a changed :class:`ProducerRecord` (a new one: the
  record is frozen). Interceptors run in list order, each getting the previous one's result.
- ``on_acknowledgement(metadata, exception)`` once per record when it is acknowledged
  (``exception`` None) or fails — also when it fails inside ``send()`` before it was queued
  (serialization, unknown partition, record too large, ``max.block.ms``). It runs on the
  producer's event loop, before the record's future resolves and its ``on_delivery``
  callback runs, so it must be quick.

Java's rule for errors holds: an exception raised by an interceptor is logged and ignored —
``on_send`` then passes on the record it was given, as if it had not run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from strom.client.records import Header, RecordMetadata

log = logging.getLogger("strom.client.interceptors")


@dataclass(frozen=True, slots=True)
class ProducerRecord:
    """A record as the application sent it (key and value not serialized yet)."""

    topic: str
    value: Any
    key: Any = None
    headers: tuple[Header, ...] = ()
    partition: int | None = None
    timestamp: int | None = None


@runtime_checkable
class ProducerInterceptor(Protocol):
    """Java's ``ProducerInterceptor``; ``close()`` is optional and called on close."""

    def on_send(self, record: ProducerRecord) -> ProducerRecord: ...

    def on_acknowledgement(self, metadata: RecordMetadata,
                           exception: BaseException | None) -> None: ...


class InterceptorChain:
    """The producer's interceptors, applied in order, each one's exceptions contained."""

    def __init__(self, interceptors: Iterable[ProducerInterceptor] = ()) -> None:
        self.interceptors: Sequence[ProducerInterceptor] = tuple(interceptors)
        for interceptor in self.interceptors:
            if not isinstance(interceptor, ProducerInterceptor):
                raise TypeError(f"{interceptor!r} has no on_send / on_acknowledgement")

    def __bool__(self) -> bool:
        return bool(self.interceptors)

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        for interceptor in self.interceptors:
            try:
                changed = interceptor.on_send(record)
            except Exception:
                log.warning("interceptor %r failed in on_send (ignored)", interceptor,
                            exc_info=True)
                continue
            if isinstance(changed, ProducerRecord):
                record = changed
            else:
                log.warning("interceptor %r returned %r from on_send, not a ProducerRecord "
                            "(ignored)", interceptor, changed)
        return record

    def on_acknowledgement(self, metadata: RecordMetadata,
                           exception: BaseException | None) -> None:
        for interceptor in self.interceptors:
            try:
                interceptor.on_acknowledgement(metadata, exception)
            except Exception:
                log.warning("interceptor %r failed in on_acknowledgement (ignored)",
                            interceptor, exc_info=True)

    def close(self) -> None:
        for interceptor in self.interceptors:
            close = getattr(interceptor, "close", None)
            if close is None:
                continue
            try:
                close()
            except Exception:
                log.warning("interceptor %r failed in close (ignored)", interceptor,
                            exc_info=True)
