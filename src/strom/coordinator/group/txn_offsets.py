"""Transactional offset commits of one ``__consumer_offsets`` partition, awaiting their markers.

A TxnOffsetCommit writes ordinary OffsetCommit records in a *transactional* batch (the
producer's id and epoch). Replayed, they are held here per producer — not visible to
OffsetFetch — until the transaction's marker reaches this partition: a commit marker moves
them into their groups' committed offsets, an abort marker drops them (Kafka's
``pendingTransactionalOffsetCommits``). Markers arrive through replay at load (control
records) and, live, from the WriteTxnMarkers path once the marker is in the log.

Invariant: ``_by_producer[pid][group][(topic, partition)]`` is the latest transactional
value of that producer's open transaction; a partition with one is *unstable* for
OffsetFetch with ``require_stable`` (UNSTABLE_OFFSET_COMMIT).
"""

from __future__ import annotations

from collections.abc import Callable

from strom.coordinator.group.records import OffsetCommitValue

TopicPartitionKey = tuple[str, int]


class TxnOffsets:
    """Pending transactional offsets by producer id, then group, then partition."""

    __slots__ = ("_by_producer",)

    def __init__(self) -> None:
        self._by_producer: dict[int, dict[str, dict[TopicPartitionKey, OffsetCommitValue]]] = {}

    def add(self, producer_id: int, group_id: str, tp: TopicPartitionKey,
            value: OffsetCommitValue | None) -> None:
        groups = self._by_producer.setdefault(producer_id, {})
        offsets = groups.setdefault(group_id, {})
        if value is None:
            offsets.pop(tp, None)
        else:
            offsets[tp] = value

    def complete(self, producer_id: int, commit: bool,
                 apply: Callable[[str, TopicPartitionKey, OffsetCommitValue], None]) -> int:
        """End the producer's transaction here; on commit ``apply`` each offset (group,
        partition, value). Returns how many offsets were pending."""
        groups = self._by_producer.pop(producer_id, {})
        count = 0
        for group_id, offsets in groups.items():
            for tp, value in offsets.items():
                count += 1
                if commit:
                    apply(group_id, tp, value)
        return count

    def is_pending(self, group_id: str, tp: TopicPartitionKey) -> bool:
        return any(tp in groups.get(group_id, {}) for groups in self._by_producer.values())

    def has_group(self, group_id: str) -> bool:
        return any(group_id in groups for groups in self._by_producer.values())

    def drop_group(self, group_id: str) -> None:
        for groups in self._by_producer.values():
            groups.pop(group_id, None)
