"""``Consumer``: Kafka's consumer contract — groups, rebalance listeners, commits, positions.

Two ways to get partitions, as in Kafka:

- :meth:`Consumer.subscribe` to topics or a regex pattern with a ``group_id``: the consumer
  joins the group (:mod:`strom.client.consumer.member`), the leader runs the assignor the
  group agreed on, and partitions move between members on rebalances. A pattern is matched
  against the cluster's topics on every metadata refresh (``metadata_max_age_ms``), so topics
  created later are picked up. With ``group_protocol="consumer"`` (KIP-848) the broker
  assigns instead (:mod:`strom.client.consumer.protocol_member`; ``group_remote_assignor``
  names its assignor, session timeout and heartbeat interval are the broker's): each poll
  reconciles towards the broker's target incrementally — revoked partitions first (committed
  and passed to ``on_partitions_revoked``), then the new ones.
- :meth:`Consumer.assign` of explicit partitions (the standalone consumer): no group
  membership; with a ``group_id`` the group's committed offsets still give the starting
  positions and commits go to the group as generation -1 (the group must have no members).

Everything that touches the group happens inside :meth:`Consumer.poll` on the caller's task
(as the Java client does it): metadata checks, rebalances with the listener's
``on_partitions_revoked`` / ``on_partitions_assigned`` / ``on_partitions_lost``, auto-commits.
So a listener may ``await consumer.commit()`` before its partitions move. Heartbeats run on a
background task and keep the membership alive between polls; a gap between polls longer than
``max_poll_interval_ms`` makes the consumer leave the group, and a commit before the next
poll rejoins raises :class:`CommitFailedError`.

Positions: a partition's position is the offset of the next record :meth:`poll` will return
(records fetched but not yet returned are buffered, up to ``max_poll_records`` per poll). A
newly assigned partition starts at the group's committed offset, else by
``auto_offset_reset`` (``earliest`` / ``latest`` / ``none`` → :class:`NoOffsetError`).
Commits without explicit offsets commit the positions, so only records :meth:`poll` has
returned are ever committed; auto-commit does the same every ``auto_commit_interval_ms``,
inside poll, before revocations and on close. Fetching runs ahead in the background
(:mod:`strom.client.consumer.prefetch`): ``seek`` / ``seek_to_*`` drop the partition's
buffered and in-flight data, ``pause`` keeps buffered records back until ``resume``, a
revoked partition's data is dropped.

Lifecycle: ``await start()`` (or ``async with``), subscribe/assign, poll, ``await close()``
(auto-commit, revoke, LeaveGroup for a dynamic member). One task at a time uses it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

from strom.client.admin_types import OffsetAndMetadata, OffsetAndTimestamp
from strom.client.cluster import DEFAULT_BOOTSTRAP
from strom.client.conn import DEFAULT_REQUEST_TIMEOUT_S
from strom.client.consumer.assignors import Assignor, Member, assignors_named
from strom.client.consumer.deserializers import (
    DeserializationError,
    Deserializer,
    deserializer,
)
from strom.client.consumer.interceptors import Interceptors
from strom.client.consumer.member import (
    GroupMember,
    IllegalGenerationError,
    MemberState,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from strom.client.consumer.prefetch import Prefetcher
from strom.client.consumer.protocol_member import ConsumerProtocolMember
from strom.client.consumer_protocol import ConsumerSubscription
from strom.client.coordinators import GROUP_KEY_TYPE, CoordinatorFinder
from strom.client.fetcher import Fetcher, NoOffsetError
from strom.client.group_admin import GroupAdmin, group_error
from strom.client.offsets import READ_UNCOMMITTED, list_offsets
from strom.client.records import ClientConfigError, ConsumerRecord
from strom.client.security import ClientSecurity
from strom.client.transactions import ConsumerGroupMetadata
from strom.common.errors import KafkaError, StromError
from strom.common.types import TopicPartition

log = logging.getLogger("strom.client.consumer")

#: Java's default: range, with cooperative-sticky offered for a later upgrade.
DEFAULT_ASSIGNORS = ("range", "cooperative-sticky")

CommitCallback = Callable[[dict[TopicPartition, OffsetAndMetadata], BaseException | None], Any]


class CommitFailedError(StromError):
    """A commit the group refused because this consumer is no longer a member of the
    generation (it left after ``max_poll_interval_ms``, or was removed); Kafka's
    CommitFailedException. ``error`` is the broker's answer when there was one (e.g.
    UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION)."""

    def __init__(self, message: str, error: KafkaError | None = None) -> None:
        super().__init__(message)
        self.error = error


class Consumer:
    """A Kafka consumer (see the module doc)."""

    def __init__(
        self,
        bootstrap: str = DEFAULT_BOOTSTRAP,
        *,
        group_id: str | None = None,
        group_instance_id: str | None = None,
        client_id: str = "strom-consumer",
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        session_timeout_ms: int = 45000,
        heartbeat_interval_ms: int = 3000,
        max_poll_interval_ms: int = 300000,
        max_poll_records: int = 500,
        metadata_max_age_ms: int = 300000,
        partition_assignment_strategy: str | Sequence[str | Assignor] = DEFAULT_ASSIGNORS,
        key_deserializer: str | Deserializer | None = None,
        value_deserializer: str | Deserializer | None = None,
        interceptors: Sequence[Any] = (),
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        max_bytes: int = 52428800,
        max_partition_bytes: int = 1048576,
        isolation_level: int | str = READ_UNCOMMITTED,
        auto_offset_reset: str = "latest",
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        client_rack: str = "",
        security: ClientSecurity | None = None,
        group_protocol: str = "classic",
        group_remote_assignor: str | None = None,
    ) -> None:
        if max_poll_records < 1:
            raise ClientConfigError("max_poll_records must be ≥ 1")
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ClientConfigError("heartbeat_interval_ms must be below session_timeout_ms")
        if group_protocol not in ("classic", "consumer"):
            raise ClientConfigError(f"group_protocol must be 'classic' or 'consumer', not "
                                    f"{group_protocol!r}")
        self.fetcher = Fetcher(bootstrap, client_id=client_id, max_wait_ms=max_wait_ms,
                               min_bytes=min_bytes, max_bytes=max_bytes,
                               max_partition_bytes=max_partition_bytes,
                               isolation_level=isolation_level,
                               auto_offset_reset=auto_offset_reset,
                               request_timeout_s=request_timeout_s, client_rack=client_rack,
                               security=security)
        # Every connection (fetches, the group's coordinator, metadata) is this cluster's, so
        # ``security`` (TLS, SASL) applies to all of them.
        self.cluster = self.fetcher.cluster
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.enable_auto_commit = enable_auto_commit and group_id is not None
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000
        self.max_poll_interval_s = max_poll_interval_ms / 1000
        self.max_poll_records = max_poll_records
        self.metadata_max_age_s = metadata_max_age_ms / 1000
        self.request_timeout_s = request_timeout_s
        self.assignors = assignors_named(partition_assignment_strategy)
        self._key_de = deserializer(key_deserializer)
        self._value_de = deserializer(value_deserializer)
        self.interceptors = Interceptors(interceptors)
        self.admin = GroupAdmin(self.cluster, request_timeout_s)
        self.member: GroupMember | ConsumerProtocolMember | None = None
        if group_id is not None and group_protocol == "consumer":
            # KIP-848: the broker assigns; session timeout and heartbeat interval are its.
            self.member = ConsumerProtocolMember(
                CoordinatorFinder(self.cluster, GROUP_KEY_TYPE, request_timeout_s, group_error),
                self.admin, self.cluster, group_id, group_instance_id=group_instance_id,
                rebalance_timeout_ms=max_poll_interval_ms, request_timeout_s=request_timeout_s,
                server_assignor=group_remote_assignor, rack_id=client_rack)
            self.member.poll_expired = self._poll_expired
        elif group_id is not None:
            self.member = GroupMember(
                CoordinatorFinder(self.cluster, GROUP_KEY_TYPE, request_timeout_s, group_error),
                self.admin, group_id, self.assignors,
                group_instance_id=group_instance_id, session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=max_poll_interval_ms,
                heartbeat_interval_ms=heartbeat_interval_ms,
                request_timeout_s=request_timeout_s)
            self.member.poll_expired = self._poll_expired
        self._topics: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._listener: Any = None
        self._subscribed = False
        self._assigned: set[TopicPartition] = set()
        self._previous: tuple[list[TopicPartition], int] = ([], -1)
        self._buffer: dict[TopicPartition, deque[ConsumerRecord]] = {}
        self._epochs: dict[TopicPartition, int] = {}
        self._last_poll = time.monotonic()
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval_s
        self._metadata_at = 0.0
        self._group_counts: dict[str, int] = {}
        self._async_commits: set[asyncio.Task[None]] = set()
        self._prefetch = Prefetcher(self.fetcher, self._store)
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> Consumer:
        await self.fetcher.start()
        self._metadata_at = time.monotonic()
        return self

    async def __aenter__(self) -> Consumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Commit (auto-commit), revoke, leave the group (dynamic members), disconnect."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._async_commits:
                await asyncio.gather(*self._async_commits, return_exceptions=True)
            if self.member is not None and self._subscribed:
                if self.member.generation is not None:
                    await self._auto_commit_now()
                    await self._revoke(set(self._assigned), "on_partitions_revoked")
                elif self._assigned:
                    await self._revoke(set(self._assigned), "on_partitions_lost")
                await self.member.close(leave=self.group_instance_id is None)
            elif self.enable_auto_commit and self._assigned:
                await self._auto_commit_now()
        finally:
            self.interceptors.close()
            await self._prefetch.close()
            await self.fetcher.close()

    # -- subscription ------------------------------------------------------------------------
    def subscribe(self, topics: Iterable[str] | str | re.Pattern[str] | None = None, *,
                  pattern: str | re.Pattern[str] | None = None, listener: Any = None) -> None:
        """Subscribe to ``topics`` or to every topic matching ``pattern`` (a regex matched
        against the whole name; a compiled pattern may also be passed as ``topics``).

        ``listener`` is any object with some of ``on_partitions_revoked(partitions)``,
        ``on_partitions_assigned(partitions)``, ``on_partitions_lost(partitions)`` (plain or
        async; ``lost`` falls back to ``revoked``), called from inside :meth:`poll`."""
        if self.member is None:
            raise ClientConfigError("subscribe() needs a group_id (use assign() without one)")
        if self._assigned and not self._subscribed:
            raise ClientConfigError("the consumer has manually assigned partitions; "
                                    "unsubscribe() first")
        if isinstance(topics, re.Pattern):
            topics, pattern = None, topics
        if pattern is not None:
            self._pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
            self._topics = self._matching()
        else:
            if topics is None:
                raise ClientConfigError("subscribe() needs topics or a pattern")
            self._pattern = None
            self._topics = {topics} if isinstance(topics, str) else set(topics)
        self._listener = listener
        self._subscribed = True
        self.member.request_rejoin("subscription changed")

    def subscription(self) -> set[str]:
        return set(self._topics) if self._subscribed else set()

    async def unsubscribe(self) -> None:
        """Drop the subscription or manual assignment; a group member revokes and leaves."""
        if self._subscribed and self.member is not None:
            if self.member.generation is not None:
                await self._auto_commit_now()
            await self._revoke(set(self._assigned), "on_partitions_revoked")
            await self.member.leave("the consumer unsubscribed")
        self._subscribed = False
        self._topics = set()
        self._pattern = None
        self._set_assignment(set())

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly ``partitions``, without group membership (see the module doc)."""
        if self._subscribed:
            raise ClientConfigError("the consumer is subscribed; unsubscribe() first")
        self._set_assignment({TopicPartition(*tp) for tp in partitions})

    def assignment(self) -> set[TopicPartition]:
        return set(self._assigned)

    def _set_assignment(self, partitions: set[TopicPartition]) -> None:
        self._assigned = set(partitions)
        self.fetcher.assign(sorted(partitions))
        for tp in list(self._buffer):
            if tp not in partitions:
                del self._buffer[tp]

    def _matching(self) -> set[str]:
        assert self._pattern is not None
        return {name for name, meta in self.cluster.metadata.topics.items()
                if not meta.is_internal and not meta.error_code
                and self._pattern.fullmatch(name)}

    # -- the poll loop -----------------------------------------------------------------------
    async def poll(self, timeout_s: float = 1.0) -> list[ConsumerRecord]:
        """Records past the positions (at most ``max_poll_records``), waiting up to
        ``timeout_s`` for some; runs rebalances, listeners and auto-commits first."""
        self._last_poll = time.monotonic()
        deadline = self._last_poll + timeout_s
        while True:
            self._prefetch.reap()
            await self._maintain()
            records = self._drain()
            if records:
                self._last_poll = time.monotonic()
                await self._fetch_ahead()
                return self._deliver(records)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            if await self._fetch_ahead():
                await self._prefetch.wait(remaining)
            else:
                await asyncio.sleep(min(remaining, 0.05))

    async def _fetch_ahead(self) -> bool:
        """Start background fetches of the assigned, unpaused partitions without buffered
        records (one Fetch in flight per broker, :mod:`strom.client.consumer.prefetch`);
        False when there is nothing to fetch now (all paused or buffered, or a rebalance is
        due)."""
        if self.member is not None and self._subscribed and self.member.needs_join():
            return False
        paused = self.fetcher.paused()
        buffer = self._buffer
        wanted = [tp for tp in self._assigned if tp not in paused and not buffer.get(tp)]
        if not wanted:
            return False
        await self._position_missing(wanted)
        await self._prefetch.start(wanted)
        return True

    def _store(self, fetched: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        """A Fetch answer's records into the buffer (the fetcher already dropped those of
        partitions sought or reassigned since the request)."""
        for tp, records in fetched.items():
            if tp in self._assigned:
                self._buffer.setdefault(tp, deque()).extend(records)

    async def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        while not self._closed:
            for record in await self.poll(1.0):
                yield record

    def _drain(self) -> list[ConsumerRecord]:
        """Up to ``max_poll_records`` buffered records of unpaused partitions (whole runs per
        partition, in offset order); notes each partition's last leader epoch for commits."""
        out: list[ConsumerRecord] = []
        room = self.max_poll_records
        paused = self.fetcher.paused()
        emptied: list[TopicPartition] = []
        for tp, queue in self._buffer.items():
            if not queue or tp in paused:
                continue
            if len(queue) <= room:
                out.extend(queue)
                emptied.append(tp)
            else:
                take = queue.popleft
                out.extend([take() for _ in range(room)])
            room = self.max_poll_records - len(out)
            self._epochs[tp] = out[-1].leader_epoch
            if not room:
                break
        for tp in emptied:  # refilled later at the end: partitions take turns
            del self._buffer[tp]
        return out

    def _deliver(self, records: list[ConsumerRecord]) -> list[ConsumerRecord]:
        if self._key_de is not None or self._value_de is not None:
            records = [self._deserialize(r) for r in records]
        return self.interceptors.on_consume(records)

    def _deserialize(self, record: ConsumerRecord) -> ConsumerRecord:
        try:
            key = record.key if self._key_de is None or record.key is None \
                else self._key_de(record.key)
            value = record.value if self._value_de is None or record.value is None \
                else self._value_de(record.value)
        except Exception as exc:
            raise DeserializationError(
                f"record {record.topic}-{record.partition}@{record.offset}: {exc}") from exc
        return record._replace(key=key, value=value)

    def _poll_expired(self) -> bool:
        return time.monotonic() - self._last_poll > self.max_poll_interval_s

    async def _maintain(self) -> None:
        member = self.member
        if member is None or not self._subscribed:
            if self.enable_auto_commit and time.monotonic() >= self._next_auto_commit:
                await self._auto_commit_now()
            return
        if member.fatal is not None:
            raise member.fatal
        if time.monotonic() - self._metadata_at >= self.metadata_max_age_s:
            await self._check_metadata()
        if member.needs_join():
            await self._rebalance()
        if self.enable_auto_commit and time.monotonic() >= self._next_auto_commit:
            await self._auto_commit_now()

    async def _check_metadata(self) -> None:
        """Periodic metadata: new pattern matches, or partition counts the leader assigned
        changing, mean a rebalance (as the Java client's metadata listener decides)."""
        assert self.member is not None
        self._metadata_at = time.monotonic()
        await self.cluster.refresh(None)
        if self._pattern is not None:
            matching = self._matching()
            if matching != self._topics:
                self._topics = matching
                self.member.request_rejoin("new topics match the subscribed pattern")
        if self.member.is_leader and self._group_counts:
            now = {t: self.cluster.metadata.partition_count(t) or 0 for t in self._group_counts}
            if now != self._group_counts:
                self.member.request_rejoin("partition counts changed")

    # -- rebalancing -------------------------------------------------------------------------
    async def _rebalance(self) -> None:
        member = self.member
        assert member is not None
        if isinstance(member, ConsumerProtocolMember):
            return await self._reconcile(member)
        owned = set(self._assigned)
        cooperative = self._cooperative(member.protocol)
        errors: list[BaseException] = []
        if owned and member.generation_lost():
            await self._revoke(owned, "on_partitions_lost", errors)
        elif owned and not cooperative:
            await self._auto_commit_now()
            await self._revoke(owned, "on_partitions_revoked", errors)
        elif owned:
            gone = {tp for tp in owned if tp.topic not in self._topics}
            if gone:
                await self._auto_commit_now()
                await self._revoke(gone, "on_partitions_revoked", errors)
        if self._pattern is not None:
            await self.cluster.refresh(None)
            self._topics = self._matching()
        result = await member.join(self._subscription_for, self._assign)
        new = {tp for tp in result.assignment.partitions if tp.topic in self._topics}
        self._previous = (sorted(new), result.generation_id)
        if self._cooperative(result.protocol):
            revoked = self._assigned - new
            added = new - self._assigned
            if revoked:
                await self._revoke(revoked, "on_partitions_revoked", errors)
                # KIP-429: the revoked partitions go to their new owner in the next round.
                member.request_rejoin("partitions revoked for a cooperative rebalance")
            self._set_assignment(new)
            await self._call_listener("on_partitions_assigned", added, errors)
        else:
            self._set_assignment(new)
            await self._call_listener("on_partitions_assigned", new, errors)
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval_s
        if errors:
            raise errors[0]

    async def _reconcile(self, member: ConsumerProtocolMember) -> None:
        """KIP-848: move towards the broker's target — revoke what it leaves out (after a
        commit), take the rest, and report what is owned (the broker then moves the member
        to its new epoch and may give more)."""
        errors: list[BaseException] = []
        if self._assigned and member.generation_lost():
            await self._revoke(set(self._assigned), "on_partitions_lost", errors)
        if self._pattern is not None:
            await self.cluster.refresh(None)
            self._topics = self._matching()
        result = await member.join(self._subscription_for, self._assign)
        new = set(result.assignment.partitions)
        revoked, added = self._assigned - new, new - self._assigned
        if revoked:
            await self._auto_commit_now()
            await self._revoke(revoked, "on_partitions_revoked", errors)
        self._set_assignment(new)
        member.owned_now(new)
        if added:
            await self._call_listener("on_partitions_assigned", added, errors)
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval_s
        if errors:
            raise errors[0]

    def _cooperative(self, protocol: str | None) -> bool:
        return any(a.cooperative for a in self.assignors if a.name == protocol)

    def _subscription_for(self, assignor: Assignor) -> ConsumerSubscription:
        owned, generation = self._previous
        current = sorted(self._assigned)
        return ConsumerSubscription(
            topics=tuple(sorted(self._topics)),
            user_data=assignor.user_data(current or owned, generation),
            owned_partitions=tuple(current),
            generation_id=generation if current else -1,
        )

    async def _assign(self, assignor: Assignor,
                      members: Sequence[Member]) -> dict[str, list[TopicPartition]]:
        """The leader's part: metadata for every member's topics, then the assignor."""
        topics = sorted({t for m in members for t in m.subscription.topics})
        if topics:
            await self.cluster.refresh(topics)
        counts = {t: self.cluster.metadata.partition_count(t) or 0 for t in topics}
        self._group_counts = counts
        plan = assignor.assign({t: n for t, n in counts.items() if n}, members)
        log.info("group %s: leader assigned with %s: %s", self.group_id, assignor.name,
                 {mid: len(tps) for mid, tps in plan.items()})
        return plan

    async def _revoke(self, partitions: set[TopicPartition], hook: str,
                      errors: list[BaseException] | None = None) -> None:
        if not partitions:
            return
        await self._call_listener(hook, partitions, errors)
        self._set_assignment(self._assigned - partitions)

    async def _call_listener(self, hook: str, partitions: set[TopicPartition],
                             errors: list[BaseException] | None = None) -> None:
        listener = self._listener
        if listener is None:
            return
        fn = getattr(listener, hook, None)
        if fn is None and hook == "on_partitions_lost":
            fn = getattr(listener, "on_partitions_revoked", None)
        if fn is None:
            return
        try:
            result = fn(set(partitions))
            if inspect.isawaitable(result):
                await result
        except Exception as exc:
            log.exception("rebalance listener %s failed", hook)
            if errors is None:
                raise
            errors.append(exc)

    # -- positions ---------------------------------------------------------------------------
    async def position(self, tp: TopicPartition) -> int:
        """The offset of the next record :meth:`poll` returns for ``tp`` (looked up from the
        committed offset or the reset policy if the partition has none yet)."""
        tp = TopicPartition(*tp)
        self._require_assigned([tp])
        queue = self._buffer.get(tp)
        if queue:
            return queue[0].offset
        if self.fetcher.position(tp) is None:
            await self._position_missing([tp])
            await self.fetcher._reset_missing()
        position = self.fetcher.position(tp)
        assert position is not None
        return position

    def seek(self, tp: TopicPartition, offset: int) -> None:
        tp = TopicPartition(*tp)
        self._require_assigned([tp])
        self._buffer.pop(tp, None)
        self.fetcher.seek(tp, offset)

    async def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None
                                ) -> None:
        tps = self._targets(partitions)
        await self.fetcher.seek_to_beginning(tps)
        self._drop_buffers(tps)

    async def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        tps = self._targets(partitions)
        await self.fetcher.seek_to_end(tps)
        self._drop_buffers(tps)

    async def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]
                                ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The first offset with timestamp ≥ each given one (None past the last record)."""
        found = await list_offsets(self.cluster, dict(timestamps),
                                   isolation_level=self.fetcher.isolation_level)
        return {tp: (o if o.offset >= 0 else None) for tp, o in found.items()}

    async def beginning_offsets(self, partitions: Iterable[TopicPartition]
                                ) -> dict[TopicPartition, int]:
        found = await list_offsets(self.cluster, dict.fromkeys(partitions, -2),
                                   isolation_level=self.fetcher.isolation_level)
        return {tp: o.offset for tp, o in found.items()}

    async def end_offsets(self, partitions: Iterable[TopicPartition]
                          ) -> dict[TopicPartition, int]:
        found = await list_offsets(self.cluster, dict.fromkeys(partitions, -1),
                                   isolation_level=self.fetcher.isolation_level)
        return {tp: o.offset for tp, o in found.items()}

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        tps = [TopicPartition(*tp) for tp in partitions]
        self._require_assigned(tps)
        self.fetcher.pause(tps)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self.fetcher.resume(partitions)

    def paused(self) -> set[TopicPartition]:
        return self.fetcher.paused()

    def _targets(self, partitions: Iterable[TopicPartition] | None) -> list[TopicPartition]:
        tps = sorted(self._assigned) if partitions is None else \
            [TopicPartition(*tp) for tp in partitions]
        self._require_assigned(tps)
        return tps

    def _require_assigned(self, tps: Iterable[TopicPartition]) -> None:
        missing = [str(tp) for tp in tps if tp not in self._assigned]
        if missing:
            raise ClientConfigError(f"partitions not assigned to this consumer: "
                                    f"{', '.join(missing)}")

    def _drop_buffers(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self._buffer.pop(tp, None)

    async def _position_missing(self, tps: Iterable[TopicPartition] | None = None) -> None:
        """Start partitions without a position at the group's committed offset, if any (the
        rest are left to ``auto_offset_reset`` on the next fetch)."""
        candidates = self._assigned if tps is None else tps
        missing = [tp for tp in candidates if self.fetcher.position(tp) is None]
        if not missing or self.group_id is None:
            return
        committed = await self.admin.list_offsets(self.group_id, missing, require_stable=True)
        for tp, o in committed.items():
            if tp in self._assigned and self.fetcher.position(tp) is None:
                self.fetcher.seek(tp, o.offset)

    # -- commits -----------------------------------------------------------------------------
    def group_metadata(self) -> ConsumerGroupMetadata:
        """What :meth:`Producer.send_offsets_to_transaction` needs from this consumer (Java's
        ``groupMetadata()``): the group id, and the current generation, member id and group
        instance id, so that the coordinator refuses the offsets of a member a rebalance has
        fenced (KIP-447). Take it after :meth:`poll` returned the records the transaction
        consumed. ClientConfigError without a ``group_id``."""
        if self.member is None or self.group_id is None:
            raise ClientConfigError("group_metadata() needs a group_id")
        return ConsumerGroupMetadata(self.group_id, self.member.generation_id,
                                     self.member.member_id, self.group_instance_id)

    def _current_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        out: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp in self._assigned:
            queue = self._buffer.get(tp)
            position = queue[0].offset if queue else self.fetcher.position(tp)
            if position is not None:
                out[tp] = OffsetAndMetadata(position, "", self._epochs.get(tp, -1))
        return out

    async def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None
                     = None) -> dict[TopicPartition, OffsetAndMetadata]:
        """Commit ``offsets`` (the next offset to read, with optional metadata and leader
        epoch), or every assigned partition's position; returns what was committed.

        Raises :class:`CommitFailedError` when this consumer is not (any more) a member of
        the group's current generation, the broker's REBALANCE_IN_PROGRESS while the group
        rebalances (commit again after the next poll)."""
        if self.group_id is None or self.member is None:
            raise ClientConfigError("commit() needs a group_id")
        plan = self._current_offsets() if offsets is None else {
            TopicPartition(*tp): o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(o)
            for tp, o in offsets.items()}
        if not plan:
            return {}
        if self._subscribed:
            generation = self.member.generation
            if generation is None:
                if self.member.state is MemberState.REBALANCING:
                    raise RebalanceInProgressError(
                        f"group {self.group_id!r} is rebalancing; commit after the next poll")
                raise CommitFailedError(
                    f"commit failed: this consumer is not a member of group "
                    f"{self.group_id!r} any more (it was removed, or did not poll within "
                    "max.poll.interval.ms); its partitions may already be elsewhere")
        else:
            generation = (-1, "")
        try:
            await self.member.commit(plan, generation)
        except KafkaError as exc:
            if exc.code in (UnknownMemberIdError.code, IllegalGenerationError.code):
                self.member.reset_generation(
                    reset_member_id=exc.code == UnknownMemberIdError.code)
                raise CommitFailedError(
                    f"commit failed: group {self.group_id!r} answered {exc.name}: this "
                    "consumer's generation is over", exc) from exc
            if exc.code == RebalanceInProgressError.code and self._subscribed:
                self.member.request_rejoin("commit found the group rebalancing")
            raise
        self.interceptors.on_commit(plan)
        return plan

    def commit_async(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None
                     = None, callback: CommitCallback | None = None) -> asyncio.Task[None]:
        """Start a commit (as :meth:`commit`) without waiting; ``callback(offsets, error)``
        runs when it completes (``error`` None on success). Returns the task."""
        snapshot = self._current_offsets() if offsets is None else dict(offsets)

        async def run() -> None:
            error: BaseException | None = None
            done: dict[TopicPartition, OffsetAndMetadata] = {}
            try:
                done = await self.commit(snapshot)
            except (KafkaError, StromError) as exc:
                error = exc
                log.info("async commit failed: %s", exc)
            if callback is not None:
                try:
                    result = callback(done or {
                        tp: o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(o)
                        for tp, o in snapshot.items()}, error)
                    if inspect.isawaitable(result):
                        await result
                except Exception:
                    log.exception("commit callback failed")

        task = asyncio.create_task(run(), name="strom-commit-async")
        self._async_commits.add(task)
        task.add_done_callback(self._async_commits.discard)
        return task

    async def _auto_commit_now(self) -> None:
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval_s
        if not self.enable_auto_commit or not self._assigned:
            return
        try:
            await self.commit()
        except (KafkaError, StromError) as exc:
            log.warning("auto-commit of group %s failed: %s", self.group_id, exc)

    async def committed(self, partitions: Iterable[TopicPartition]
                        ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offset of each partition (None where there is none)."""
        if self.group_id is None:
            raise ClientConfigError("committed() needs a group_id")
        tps = [TopicPartition(*tp) for tp in partitions]
        found = await self.admin.list_offsets(self.group_id, tps, require_stable=True)
        return {tp: found.get(tp) for tp in tps}


#: Kafka's name for the error of ``auto_offset_reset="none"`` without a committed offset.
NoOffsetForPartitionError = NoOffsetError
