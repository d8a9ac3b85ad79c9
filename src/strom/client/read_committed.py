"""Which fetched batches a consumer hands out: Kafka's read_committed rule (sans-io).

A read_committed Fetch returns records only below the last stable offset, plus the
partition's ``aborted_transactions`` overlapping the response: for each aborted transaction,
its producer id and the offset of its first record. Batches still include aborted data
(the broker never rewrites the log); the consumer drops it, as Kafka's consumer does:

- walking the batches in offset order, an aborted transaction becomes *active* once a batch
  whose last offset is at or past its first offset is reached;
- a transactional data batch of a producer with an active aborted transaction is dropped;
- that producer's ABORT marker (a control batch) ends it: later batches of the producer
  belong to a new transaction and are kept (unless the list names that one too).

Control batches (commit / abort markers) never reach the application, in either isolation
level; batches of non-transactional or idempotent-only producers are always kept. One
:class:`AbortedTransactions` serves the batches of one partition of one response.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import Any

from strom.common.errors import CorruptMessageError
from strom.protocol.records.batch import BatchHeader
from strom.protocol.records.control import ControlType, control_type_of


def is_abort_marker(header: BatchHeader, records: Sequence[Any]) -> bool:
    """Whether a control batch holds an ABORT marker (its one record's key says so)."""
    if not header.is_control or not records:
        return False
    try:
        return control_type_of(records[0].key) is ControlType.ABORT
    except CorruptMessageError:
        return False


class AbortedTransactions:
    """The aborted transactions of one fetched partition, consumed in offset order.

    Lifecycle: built from one response's ``aborted_transactions``; :meth:`drops` is then
    called once per batch of that response, in offset order.
    """

    def __init__(self, aborted: Iterable[tuple[int, int]] = ()) -> None:
        # (first offset, producer id), smallest first offset on top.
        self._upcoming = [(first, pid) for pid, first in aborted]
        heapq.heapify(self._upcoming)
        self._active: set[int] = set()

    def drops(self, header: BatchHeader, records: Sequence[Any]) -> bool:
        """Whether the batch's records are withheld from the application."""
        if header.producer_id < 0:  # no producer: never transactional
            return header.is_control
        last = header.base_offset + header.last_offset_delta
        while self._upcoming and self._upcoming[0][0] <= last:
            self._active.add(heapq.heappop(self._upcoming)[1])
        if header.is_control:
            if is_abort_marker(header, records):
                self._active.discard(header.producer_id)
            return True
        return header.is_transactional and header.producer_id in self._active


def aborted_of(partition: Any) -> list[tuple[int, int]]:
    """``(producer id, first offset)`` of a decoded Fetch partition's aborted transactions
    (none when the field is absent or null, as in read_uncommitted answers)."""
    return [(int(t.producer_id), int(t.first_offset))
            for t in getattr(partition, "aborted_transactions", None) or ()]
