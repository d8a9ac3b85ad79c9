"""``strom consume --group``: start from a group's committed offsets and commit progress.

strom's client has no group member yet (no JoinGroup / SyncGroup / Heartbeat), so this is
*not* a member of the group's protocol. What it does, as a standalone consumer of the group:

- reads the group's committed offsets (OffsetFetch) and starts each partition there; a
  partition without one starts per ``auto.offset.reset`` (``--from-beginning``: earliest);
- consumes every partition of the topic (no assignment is shared with other consumers);
- with ``enable.auto.commit`` (the default, as Kafka) commits, every
  ``auto.commit.interval.ms`` (default 5000) and on exit (end of ``--max-messages`` /
  ``--timeout-ms``, Ctrl-C, SIGTERM), the offset after the last record *printed* in each
  partition — unlike Kafka's console consumer, which commits its fetch position and so can
  skip records it fetched but never printed;
- commits the way Kafka's admin client does (generation -1, no member id), which the
  coordinator accepts only while the group has no active members. A group with members is
  refused up front, and a commit refused later (a member joined meanwhile) ends the command
  with that error (UNKNOWN_MEMBER_ID).
"""

from __future__ import annotations

import time

from strom.cli.common import UsageError
from strom.client.admin_types import OffsetAndMetadata
from strom.client.fetcher import NoOffsetError
from strom.client.records import ConsumerRecord
from strom.client.sync import SyncAdminClient, SyncFetcher
from strom.common.errors import KafkaError
from strom.common.types import TopicPartition

DEFAULT_COMMIT_INTERVAL_MS = 5000


class GroupOffsets:
    """Start positions from, and progress commits to, one group's committed offsets.

    Lifecycle: :meth:`start` once (positions the fetcher), then :meth:`printed` for each
    record written out, :meth:`caught_up` after a poll whose records were all written,
    :meth:`maybe_commit` in the loop and :meth:`commit` at the end. Used from one thread.
    """

    def __init__(self, admin: SyncAdminClient, group_id: str, *, auto_commit: bool = True,
                 interval_ms: int = DEFAULT_COMMIT_INTERVAL_MS) -> None:
        if not group_id:
            raise UsageError("--group must not be empty")
        self.admin = admin
        self.group_id = group_id
        self.auto_commit = auto_commit
        self.interval_s = interval_ms / 1000.0
        self._committed: dict[TopicPartition, int] = {}
        # Next offset to commit and the leader epoch of the record before it, per partition.
        self._done: dict[TopicPartition, tuple[int, int]] = {}
        self._next_commit = time.monotonic() + self.interval_s

    def start(self, fetcher: SyncFetcher, partitions: list[TopicPartition],
              reset: str) -> None:
        """Refuse an active group, then seek each partition to its committed offset (or per
        ``reset`` — earliest, latest or none — when it has none)."""
        if self.auto_commit:
            self._refuse_active()
        committed = self.admin.list_consumer_group_offsets(self.group_id, partitions)
        for tp, offset in committed.items():
            fetcher.seek(tp, offset.offset)
            self._committed[tp] = offset.offset
        missing = [tp for tp in partitions if tp not in committed]
        if missing and reset == "none":
            raise NoOffsetError(
                f"group {self.group_id!r} has no committed offset for "
                f"{', '.join(map(str, missing))} and auto.offset.reset is none")
        if missing and reset == "earliest":
            fetcher.seek_to_beginning(missing)
        elif missing:
            fetcher.seek_to_end(missing)
        self.caught_up(fetcher)

    def _refuse_active(self) -> None:
        try:
            group = self.admin.describe_group(self.group_id)
        except KafkaError as exc:
            if exc.name == "GROUP_ID_NOT_FOUND":
                return
            raise
        if group.is_active:
            raise UsageError(
                f"group {self.group_id!r} has active members ({group.state}); strom consume "
                "--group does not join the group protocol, so it can only commit for a group "
                "without running consumers (or pass enable.auto.commit=false)")

    def printed(self, record: ConsumerRecord) -> None:
        tp = TopicPartition(record.topic, record.partition)
        self._done[tp] = (record.offset + 1, record.leader_epoch)

    def caught_up(self, fetcher: SyncFetcher) -> None:
        """Every record fetched so far was printed: the fetch positions are the progress
        (they also step over transaction markers and reset out-of-range offsets)."""
        for tp in fetcher.assignment():
            position = fetcher.position(tp)
            if position is not None and position != self._done.get(tp, (None,))[0]:
                self._done[tp] = (position, -1)

    def maybe_commit(self) -> None:
        if self.auto_commit and time.monotonic() >= self._next_commit:
            self.commit()

    def commit(self) -> None:
        """Commit the progress that differs from what the group has (nothing when
        auto-commit is off)."""
        self._next_commit = time.monotonic() + self.interval_s
        if not self.auto_commit:
            return
        changed = {tp: OffsetAndMetadata(offset, "", epoch)
                   for tp, (offset, epoch) in self._done.items()
                   if self._committed.get(tp) != offset}
        if not changed:
            return
        self.admin.alter_consumer_group_offsets(self.group_id, changed)
        self._committed.update({tp: o.offset for tp, o in changed.items()})
