"""Transactions during a cleaning pass (Kafka's ``CleanedTransactionMetadata``).

A pass walks batches in offset order. :class:`TxnCleaning` is fed the aborted transactions
overlapping what the pass reads (from the transaction indexes, :class:`AbortedTxn`) and
decides, batch by batch:

* a transactional data batch of an aborted transaction is discarded (its records go, even
  the latest of their keys: they were never committed) and the offset map never sees it;
* an abort marker is kept, with its transaction-index entry, while the pass still met data
  of its transaction; once none is left it may go (:meth:`on_control` returns True);
* a commit marker may go once the pass met no data of its transaction (its records were
  all superseded): a marker that ends a transaction whose data is still in the log must
  stay, or producer state rebuilt from the log would think the transaction open;
* an empty control batch (an earlier pass emptied it) may go; other control types stay.

A marker that *may* go is not removed at once: like a tombstone it first gets a delete
horizon (now + ``delete.retention.ms``), so consumers positioned before it still see it, and
a later pass removes it (the caller applies that rule, and keeps it — emptied — when it is
the last batch of a live producer).

The state lives for one pass, across its segment groups (a transaction's data may end in
one group and its marker lie in the next). Not thread-safe: one pass, one thread or process.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

from strom.protocol.records.batch import BatchHeader
from strom.protocol.records.control import ControlType
from strom.storage.txn_index import AbortedTxn


@dataclass(slots=True)
class _OngoingAbort:
    txn: AbortedTxn
    last_batch_seen: int | None = None  # last offset of the latest batch of it this pass met


class TxnCleaning:
    """What one pass knows of transactions (module docstring)."""

    def __init__(self, aborted: Iterable[AbortedTxn] = ()) -> None:
        self._pending: list[tuple[int, int, AbortedTxn]] = []  # heap by first offset
        self._known: set[tuple[int, int]] = set()
        self._aborted: dict[int, _OngoingAbort] = {}  # producer id -> its aborted txn, begun
        self._committed: set[int] = set()  # producers whose committed data the pass met
        self.retained: list[AbortedTxn] = []  # index entries for the segment being written
        self.add_aborted(aborted)

    def add_aborted(self, txns: Iterable[AbortedTxn]) -> None:
        """Aborted transactions overlapping the next batches (duplicates are ignored)."""
        for txn in txns:
            key = (txn.producer_id, txn.first_offset)
            if key not in self._known:
                self._known.add(key)
                heapq.heappush(self._pending, (txn.first_offset, txn.producer_id, txn))

    def _begin_up_to(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[0][0] <= offset:
            txn = heapq.heappop(pending)[2]
            self._aborted.setdefault(txn.producer_id, _OngoingAbort(txn))

    def on_data_batch(self, header: BatchHeader) -> bool:
        """A data batch in offset order; True if it belongs to an aborted transaction."""
        self._begin_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._aborted.get(header.producer_id)
        if ongoing is not None:
            ongoing.last_batch_seen = header.last_offset
            return True
        self._committed.add(header.producer_id)
        return False

    def on_control(self, header: BatchHeader, control_type: ControlType | None) -> bool:
        """A control batch in offset order (``control_type`` None: it has no record); True
        if it may go (after its delete horizon). An abort marker that stays puts its
        transaction in :attr:`retained`."""
        self._begin_up_to(header.last_offset)
        pid = header.producer_id
        if control_type is None:
            return True
        if control_type is ControlType.ABORT:
            ongoing = self._aborted.pop(pid, None)
            if ongoing is not None and ongoing.last_batch_seen is not None:
                self.retained.append(ongoing.txn)
                return False
            return True
        if control_type is ControlType.COMMIT:
            if pid in self._committed:
                self._committed.discard(pid)
                return False
            return True
        return False

    def take_retained(self) -> list[AbortedTxn]:
        """The entries retained since the last call (one segment group's)."""
        retained, self.retained = self.retained, []
        return retained
