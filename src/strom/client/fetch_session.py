"""The client side of one broker's incremental fetch session (KIP-227), sans-io.

A Fetch request v7+ carries ``session_id`` and ``session_epoch``:

- ``(0, 0)``: a *full* request naming every partition, asking the broker to open a session;
  the response's ``session_id`` is the new session (0: the broker keeps none, so every
  request stays full).
- ``(id, n)`` with ``n`` = 1, 2, …: an *incremental* request naming only partitions that are
  new or whose fetch offset / max bytes changed since the last request, and listing removed
  ones in ``forgotten_topics_data``. Its response lists only partitions with something new
  (records, high watermark, error); absent partitions are unchanged.
- ``(0, -1)``: a sessionless full request (Fetch before v7).

After FETCH_SESSION_ID_NOT_FOUND or INVALID_FETCH_SESSION_EPOCH, or any failed exchange (the
epoch is then uncertain), the next request is full again and opens a new session. The
epoch wraps from 2^31 - 1 to 1.

One :class:`FetchSession` per broker connection, owned by the fetcher on its loop; exactly one
request of a session may be in flight (build → send → :meth:`FetchSession.completed` or
:meth:`FetchSession.failed`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from strom.common.types import TopicPartition

INITIAL_EPOCH = 0
SESSIONLESS_EPOCH = -1
_MAX_EPOCH = 2**31 - 1
#: Fetch v7 introduced sessions.
MIN_SESSION_VERSION = 7

#: What a request says about one partition: (fetch offset, partition max bytes).
PartitionFetch = tuple[int, int]


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """The session part of one Fetch request."""

    session_id: int
    epoch: int
    partitions: dict[TopicPartition, PartitionFetch]
    forgotten: list[TopicPartition]
    full: bool


@dataclass(slots=True)
class FetchSession:
    """One broker's session state (see the module doc)."""

    session_id: int = 0
    epoch: int = INITIAL_EPOCH
    _sent: dict[TopicPartition, PartitionFetch] = field(default_factory=dict)
    _pending: dict[TopicPartition, PartitionFetch] | None = None

    @property
    def holds_partitions(self) -> bool:
        """Whether the broker's session still lists partitions (to forget, if unwanted)."""
        return self.session_id != 0 and bool(self._sent)

    def build(self, wanted: Mapping[TopicPartition, PartitionFetch],
              version: int) -> SessionRequest:
        """The request for ``wanted`` (every partition to fetch now, with its state)."""
        self._pending = dict(wanted)
        if version < MIN_SESSION_VERSION:
            return SessionRequest(0, SESSIONLESS_EPOCH, dict(wanted), [], True)
        if self.session_id == 0:
            return SessionRequest(0, INITIAL_EPOCH, dict(wanted), [], True)
        changed = {tp: state for tp, state in wanted.items() if self._sent.get(tp) != state}
        forgotten = [tp for tp in self._sent if tp not in wanted]
        return SessionRequest(self.session_id, self.epoch, changed, forgotten, False)

    def completed(self, error_code: int, session_id: int) -> None:
        """Record the response to the last built request (its top-level error and id)."""
        pending, self._pending = self._pending, None
        if error_code or pending is None:
            self.reset()
            return
        if self.session_id == 0:
            self.session_id = session_id
            self.epoch = 1 if session_id else INITIAL_EPOCH
        else:
            self.epoch = 1 if self.epoch >= _MAX_EPOCH else self.epoch + 1
        self._sent = pending if self.session_id else {}

    def failed(self) -> None:
        """The last request got no usable answer: start over with a full request."""
        self._pending = None
        self.reset()

    def reset(self) -> None:
        self.session_id = 0
        self.epoch = INITIAL_EPOCH
        self._sent = {}
