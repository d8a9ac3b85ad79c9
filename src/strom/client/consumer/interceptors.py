"""Consumer interceptors, as Java's ``ConsumerInterceptor``.

An interceptor is any object with some of:

- ``on_consume(records) -> records`` — called inside ``poll`` with the records about to be
  returned (after deserialization); what it returns is what ``poll`` returns (it may filter
  or replace records). Interceptors chain in the order given.
- ``on_commit(offsets)`` — called after offsets were committed (every commit kind,
  auto-commit included) with the committed ``{TopicPartition: OffsetAndMetadata}``.
- ``close()`` — called once when the consumer closes.

As in Java, an exception from an interceptor is logged and does not fail the poll or commit
(``on_consume`` then passes the records on unchanged).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from strom.client.admin_types import OffsetAndMetadata
from strom.common.types import TopicPartition

log = logging.getLogger("strom.client.consumer")


class Interceptors:
    """The chain of a consumer's interceptors (possibly empty)."""

    def __init__(self, interceptors: Sequence[Any] = ()) -> None:
        self._chain = list(interceptors)

    def on_consume(self, records: list[Any]) -> list[Any]:
        for interceptor in self._chain:
            hook = getattr(interceptor, "on_consume", None)
            if hook is None:
                continue
            try:
                records = list(hook(records))
            except Exception:
                log.exception("interceptor %r failed in on_consume", interceptor)
        return records

    def on_commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        for interceptor in self._chain:
            hook = getattr(interceptor, "on_commit", None)
            if hook is None:
                continue
            try:
                hook(dict(offsets))
            except Exception:
                log.exception("interceptor %r failed in on_commit", interceptor)

    def close(self) -> None:
        for interceptor in self._chain:
            hook = getattr(interceptor, "close", None)
            if hook is None:
                continue
            try:
                hook()
            except Exception:
                log.exception("interceptor %r failed in close", interceptor)
