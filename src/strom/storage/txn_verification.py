"""KIP-890 verification guards of one partition: Kafka's ``VerificationGuard`` and
``VerificationStateEntry``.

A transactional producer's first batch in a partition (no transaction of its own open here)
may be appended only once its transaction coordinator confirmed that the partition is in the
producer's ongoing transaction. The answer comes back later (from another broker, over the
wire), and meanwhile the transaction may end: its abort marker reaches this partition, the
producer starts a new transaction that does not hold this partition, and the stale "yes"
would start a transaction here that no coordinator knows of (a hanging transaction). The
guard closes that window:

* before asking, the leader takes the producer's guard (:meth:`VerificationGuards.start`): a
  unique token, one per producer at a time (concurrent verifications share it);
* the append presents it; a transactional data batch of a producer without an open
  transaction here is refused (INVALID_TXN_STATE) unless it presents the producer's current
  guard (:meth:`VerificationGuards.verifies`);
* every transactional batch of the producer that reaches the log — a data batch (the
  transaction is open now and needs no guard) or a marker (the transaction ended) — clears
  the guard (:meth:`VerificationGuards.clear`), so an answer about the transaction before can
  no longer start one. Guards never verified are dropped after ``producer.id.expiration.ms``.

In memory only (never in a snapshot); owned by the thread that appends to the log.
"""

from __future__ import annotations

import itertools

_ids = itertools.count(1)


class VerificationGuard:
    """An opaque token: equal only to itself."""

    __slots__ = ("_id",)

    def __init__(self) -> None:
        self._id = next(_ids)

    def __repr__(self) -> str:
        return f"VerificationGuard({self._id})"


class VerificationGuards:
    """The current guard of each producer being verified, with when it was taken."""

    __slots__ = ("_guards",)

    def __init__(self) -> None:
        self._guards: dict[int, tuple[VerificationGuard, int]] = {}

    def start(self, producer_id: int, now_ms: int) -> VerificationGuard:
        """The producer's guard, taken now if it has none."""
        entry = self._guards.get(producer_id)
        if entry is None:
            entry = self._guards[producer_id] = (VerificationGuard(), now_ms)
        return entry[0]

    def verifies(self, producer_id: int, guard: VerificationGuard | None) -> bool:
        """Whether ``guard`` is the producer's current guard."""
        entry = self._guards.get(producer_id)
        return guard is not None and entry is not None and entry[0] is guard

    def clear(self, producer_id: int) -> None:
        self._guards.pop(producer_id, None)

    def expire(self, now_ms: int, expiration_ms: int) -> None:
        """Drop guards taken ``expiration_ms`` or more ago (verifications never answered)."""
        stale = [pid for pid, (_, taken) in self._guards.items()
                 if now_ms - taken >= expiration_ms]
        for pid in stale:
            del self._guards[pid]

    def __len__(self) -> int:
        return len(self._guards)
