"""Committed offsets of one ``__consumer_offsets`` partition's groups: the offset half of
:class:`~strom.coordinator.group.shard.GroupShard` (a base class of it).

OffsetCommit (validated against the group's generation and member, Kafka's rules),
TxnOffsetCommit (written in the producer's transactional batch, committed by its marker),
OffsetFetch (``require_stable``: UNSTABLE_OFFSET_COMMIT while a commit is in flight or a
transactional commit is open), OffsetDelete and offset expiry (KIP-211). Writes go through
the shard's runtime context; nothing here changes committed state directly — replay does
(see the shard's module docstring), so a failed write is never visible.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from strom.common.clock import Clock
from strom.common.errors import KafkaError
from strom.coordinator.group.codes import (
    FENCED_INSTANCE_ID,
    GROUP_ID_NOT_FOUND,
    GROUP_SUBSCRIBED_TO_TOPIC,
    ILLEGAL_GENERATION,
    NON_EMPTY_GROUP,
    NONE,
    OFFSET_METADATA_TOO_LARGE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    UNSTABLE_OFFSET_COMMIT,
)
from strom.coordinator.group.model import (
    CommittedOffset,
    Group,
    GroupSettings,
    GroupState,
    Member,
    OffsetToCommit,
)
from strom.coordinator.group.records import (
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
    encode_key,
    encode_value,
)
from strom.coordinator.group.txn_offsets import TxnOffsets
from strom.coordinator.runtime import (
    COORDINATOR_NOT_AVAILABLE,
    ShardContext,
    answer_once,
    coordinator_error,
)
from strom.storage.txn_verification import VerificationGuard

log = logging.getLogger("strom.coordinator.group")


class OffsetOperations:
    """Offset operations of a group shard; the shard provides the state and the helpers
    declared below (its groups, clock, settings, runtime context and membership checks)."""

    groups: dict[str, Group]
    clock: Clock
    settings: GroupSettings
    context: ShardContext
    txn_offsets: TxnOffsets

    if TYPE_CHECKING:
        def _write(self, records: list[Record], on_commit: Callable[[], None],
                   on_failure: Callable[[KafkaError], None],
                   on_timeout: Callable[[KafkaError], None] | None = None) -> None: ...

        def _check_member(self, group: Group, member_id: str,
                          instance_id: str | None) -> int: ...

        def _touch(self, group: Group, member: Member) -> None: ...

        def _consumer_commit_errors(self, group_id: str, member_id: str, epoch: int,
                                    stale_epoch_error: int, partitions: list[tuple[str, int]]
                                    ) -> list[int] | None: ...

        def _consumer_txn_commit_error(self, group_id: str, member_id: str,
                                       epoch: int) -> int | None: ...

        def _consumer_subscribed(self, group_id: str) -> set[str] | None: ...

        def _consumer_tombstones(self, group_id: str) -> list[tuple[bytes, bytes | None]]: ...

        def _delete(self, group: Group, on_commit: Callable[[], None],
                    on_failure: Callable[[KafkaError], None],
                    offsets: Iterable[tuple[str, int]] | None = None, *,
                    on_timeout: Callable[[KafkaError], None] | None = None,
                    extra: list[tuple[bytes, bytes | None]] | None = None) -> None: ...

    def commit_offsets(
        self, *, group_id: str, generation: int, member_id: str,
        group_instance_id: str | None, offsets: list[OffsetToCommit],
        expire_timestamp: int, group_not_found_error: int,
        callback: Callable[[list[int]], None], stale_epoch_error: int = ILLEGAL_GENERATION,
    ) -> None:
        """Answer one error per offset through ``callback`` once the commit is durable (or
        at once when nothing is written, or with COORDINATOR_NOT_AVAILABLE when the write is
        not committed within the timeout: it stays in flight, UNSTABLE for ``require_stable``
        fetches, until it commits or fails)."""
        callback = answer_once(callback)
        refused = self._consumer_commit_errors(group_id, member_id, generation,
                                               stale_epoch_error,
                                               [(o.topic, o.partition) for o in offsets])
        if refused is None:
            error = self._validate_commit(group_id, generation, member_id, group_instance_id,
                                          group_not_found_error)
            if error:
                return callback([error] * len(offsets))
            refused = [NONE] * len(offsets)
        accepted = [o for o, e in zip(offsets, refused, strict=True) if not e]
        accepted_errors, records = self._offset_records(group_id, accepted, expire_timestamp)
        merged = iter(accepted_errors)
        errors = [e or next(merged) for e in refused]
        if not records:
            return callback(errors)
        group = self.groups.get(group_id)
        partitions = [(k.topic, k.partition) for k, _ in records
                      if isinstance(k, OffsetCommitKey)]
        if group is not None:
            for tp in partitions:
                group.pending_offsets[tp] = group.pending_offsets.get(tp, 0) + 1

        def settle() -> None:
            if group is None:
                return
            for tp in partitions:
                left = group.pending_offsets.get(tp, 1) - 1
                if left > 0:
                    group.pending_offsets[tp] = left
                else:
                    group.pending_offsets.pop(tp, None)

        def committed() -> None:
            settle()
            callback(errors)

        def answer_error(exc: KafkaError) -> None:
            code = coordinator_error(exc, offset_commit=True)
            callback([e or code for e in errors])

        def failed(exc: KafkaError) -> None:
            settle()
            answer_error(exc)

        self._write(records, committed, failed, answer_error)
        return None

    def _validate_commit(self, group_id: str, generation: int, member_id: str,
                         instance_id: str | None, group_not_found_error: int) -> int:
        group = self.groups.get(group_id)
        if group is None:
            return NONE if generation < 0 else group_not_found_error
        if group.state is GroupState.DEAD:
            return COORDINATOR_NOT_AVAILABLE
        if generation < 0 and not member_id and group.state is GroupState.EMPTY:
            return NONE  # a simple (standalone) commit
        if generation < 0 and not member_id:
            return UNKNOWN_MEMBER_ID  # standalone commits into an active group are refused
        error = self._check_member(group, member_id, instance_id)
        if error:
            return error
        if generation != group.generation:
            return ILLEGAL_GENERATION
        if group.state is GroupState.COMPLETING_REBALANCE:
            return REBALANCE_IN_PROGRESS
        self._touch(group, group.members[member_id])
        return NONE

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None,
        require_stable: bool = False,
    ) -> list[CommittedOffset]:
        """Committed offsets (-1 where there is none); ``None`` asks for all of them. With
        ``require_stable`` a partition with a commit in flight or an open transactional
        commit answers UNSTABLE_OFFSET_COMMIT (the client retries), as Kafka."""
        group = self.groups.get(group_id)
        stored = group.offsets if group is not None else {}
        wanted = sorted(stored) if partitions is None else partitions
        out = []
        for topic, partition in wanted:
            tp = (topic, partition)
            if require_stable and (self.txn_offsets.is_pending(group_id, tp) or (
                    group is not None and tp in group.pending_offsets)):
                out.append(CommittedOffset(topic, partition, -1, -1, "",
                                           UNSTABLE_OFFSET_COMMIT))
                continue
            value = stored.get(tp)
            if value is None:
                out.append(CommittedOffset(topic, partition, -1, -1, ""))
            else:
                out.append(CommittedOffset(topic, partition, value.offset, value.leader_epoch,
                                           value.metadata))
        return out

    def txn_commit_offsets(
        self, *, group_id: str, producer_id: int, producer_epoch: int, generation: int,
        member_id: str, group_instance_id: str | None, offsets: list[OffsetToCommit],
        callback: Callable[[list[int]], None],
        verification_guard: VerificationGuard | None = None,
    ) -> None:
        """TxnOffsetCommit: write the offsets in a transactional batch of the producer; they
        become committed with the transaction's commit marker. Member checks as Kafka's
        ``doTxnCommitOffsets`` (a v0-2 request carries no member: only the group's life is
        checked); one error per offset through ``callback`` once the write is durable.
        ``verification_guard``: the KIP-890 guard taken when the producer's transaction
        coordinator was asked whether this partition is in its transaction (none when the
        transaction already wrote here); the log refuses the batch if the transaction ended
        since (INVALID_TXN_STATE)."""
        group = self.groups.get(group_id)
        error = NONE
        consumer_error = self._consumer_txn_commit_error(group_id, member_id, generation)
        if consumer_error is not None:
            error = consumer_error
        elif group is not None and group.state is GroupState.DEAD:
            error = COORDINATOR_NOT_AVAILABLE
        elif member_id:
            if group is None or member_id not in group.members:
                error = UNKNOWN_MEMBER_ID
            elif group_instance_id is not None and group.static_members.get(
                    group_instance_id) != member_id:
                error = FENCED_INSTANCE_ID
            elif generation != group.generation:
                error = ILLEGAL_GENERATION
        if error:
            return callback([error] * len(offsets))
        errors, records = self._offset_records(group_id, offsets, -1)
        if not records:
            return callback(errors)
        raw = [(encode_key(k), encode_value(v)) for k, v in records]
        answer = answer_once(callback)

        def failed(exc: KafkaError) -> None:
            answer([e or coordinator_error(exc, offset_commit=True) for e in errors])

        self.context.write(
            raw, producer_id=producer_id, producer_epoch=producer_epoch, transactional=True,
            verification_guard=verification_guard, on_commit=lambda: answer(errors),
            on_failure=failed, on_timeout=failed)
        return None

    def _offset_records(self, group_id: str, offsets: list[OffsetToCommit],
                        expire_timestamp: int) -> tuple[list[int], list[Record]]:
        """One error per offset (OFFSET_METADATA_TOO_LARGE or NONE) and the records of the
        accepted ones, committed now."""
        now = self.clock.now_ms()
        errors: list[int] = []
        records: list[Record] = []
        for o in offsets:
            metadata = o.metadata or ""
            if len(metadata.encode("utf-8")) > self.settings.metadata_max_bytes:
                errors.append(OFFSET_METADATA_TOO_LARGE)
                continue
            errors.append(NONE)
            records.append((OffsetCommitKey(group_id, o.topic, o.partition),
                            OffsetCommitValue(o.offset, o.leader_epoch, metadata, now,
                                              expire_timestamp)))
        return errors, records

    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]],
        callback: Callable[[int, list[int]], None],
    ) -> None:
        """OffsetDelete: (top-level error, one error per partition) through ``callback``."""
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return callback(GROUP_ID_NOT_FOUND, [])
        if group.members and group.protocol_type != "consumer":
            return callback(NON_EMPTY_GROUP, [])
        subscribed = group.subscribed_topics() if group.members else set()
        consumer = self._consumer_subscribed(group_id)  # a KIP-848 group's members' topics
        if consumer is not None:
            subscribed = consumer
        errors: list[int] = []
        records: list[Record] = []
        for topic, partition in partitions:
            if subscribed is None or topic in subscribed:
                errors.append(GROUP_SUBSCRIBED_TO_TOPIC)
                continue
            errors.append(NONE)
            if (topic, partition) in group.offsets or (topic, partition) in group.pending_offsets:
                records.append((OffsetCommitKey(group_id, topic, partition), None))
        def deliver(result: tuple[int, list[int]]) -> None:
            callback(*result)

        answer = answer_once(deliver)

        def failed(exc: KafkaError) -> None:
            answer((coordinator_error(exc), []))

        self._write(records, lambda: answer((NONE, errors)), failed, failed)
        return None

    def expire_offsets(self) -> int:
        """KIP-211: offsets of an Empty group expire ``offsets.retention.minutes`` after it
        became empty; standalone commits (no group protocol) and offsets of topics a Stable
        consumer group no longer subscribes to expire by commit time; an explicit v1 expire
        timestamp wins. An Empty group left without offsets is deleted. Offsets with a
        commit in flight wait. Returns how many offsets were written off (failures are
        logged)."""
        now = self.clock.now_ms()
        retention = self.settings.offsets_retention_ms
        expired = 0
        for group in list(self.groups.values()):
            if group.pending_members or group.state is GroupState.DEAD:
                continue  # a group being created (KIP-394) or deleted
            doomed: list[tuple[str, int]] = []
            subscribed = group.subscribed_topics() if group.state is GroupState.STABLE else None
            # A KIP-848 group with members keeps the offsets of the topics they subscribe to;
            # its classic shell (which only holds the offsets) is never Empty for expiry.
            consumer = self._consumer_subscribed(group.group_id)
            active_consumer = bool(consumer)
            for tp, value in group.offsets.items():
                if tp in group.pending_offsets:
                    continue
                if value.expire_timestamp >= 0:
                    if value.expire_timestamp <= now:
                        doomed.append(tp)
                    continue
                if active_consumer:
                    if consumer is not None and tp[0] in consumer:
                        continue
                    base = value.commit_timestamp
                elif group.state is GroupState.EMPTY:
                    base = (group.state_timestamp if group.protocol_type
                            and group.state_timestamp >= 0 else value.commit_timestamp)
                elif subscribed is not None and tp[0] not in subscribed:
                    base = value.commit_timestamp
                else:
                    continue
                if base + retention <= now:
                    doomed.append(tp)
            drop_group = (group.state is GroupState.EMPTY and not active_consumer
                          and not group.pending_offsets and len(doomed) == len(group.offsets))
            if not doomed and not drop_group:
                continue
            group_id = group.group_id

            def failed(exc: KafkaError, group_id: str = group_id) -> None:
                log.warning("offset expiry for group %s failed: %s", group_id, exc)

            if drop_group:  # an empty consumer group goes with its offsets, as in Kafka
                self._delete(group, lambda: None, failed, doomed,
                             extra=self._consumer_tombstones(group_id))
            else:
                self._write([(OffsetCommitKey(group_id, t, p), None) for t, p in doomed],
                            lambda: None, failed)
            expired += len(doomed)
        return expired
