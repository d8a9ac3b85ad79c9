"""One consumer's membership in a KIP-848 group (``group_protocol="consumer"``), client side.

The broker assigns; the member heartbeats (ConsumerGroupHeartbeat v1) and reconciles:

1. Join: a heartbeat with epoch 0, a member id the client generated (KIP-1082), the
   subscribed topic names, the rebalance timeout (``max.poll.interval.ms``) and an empty list
   of owned partitions. The answer carries the member epoch, the heartbeat interval and the
   assignment (topics by id).
2. Heartbeat every interval the broker gave, from a background task: the member's epoch, and —
   only when they changed since the last heartbeat — its subscription and the partitions it
   owns. An answer with an assignment replaces the target the consumer reconciles towards.
3. The consumer reconciles at its next poll (:meth:`ConsumerProtocolMember.join` returns the
   target): it revokes what the target leaves out (``on_partitions_revoked``), takes the rest
   (``on_partitions_assigned``), and reports what it owns (:meth:`owned_now`), sent at once:
   the broker moves the member to the new epoch only after the revoked partitions are
   reported gone.
4. FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: the partitions are lost (``on_partitions_lost``),
   the member joins again with epoch 0 and the same id. FENCED_INSTANCE_ID /
   UNRELEASED_INSTANCE_ID / UNSUPPORTED_ASSIGNOR / INVALID_REGULAR_EXPRESSION are fatal,
   raised from the next poll, as the Java consumer does.
5. Leave: epoch -1 (a static member, ``group.instance.id``: -2, keeping its partitions for the
   broker's session timeout).

Commits carry the member epoch as the generation (OffsetCommit v9+). It has the duck type of
:class:`~strom.client.consumer.member.GroupMember` the consumer drives (``generation``,
``needs_join``, ``join``, ``leave``, ``close``, ``commit``); ``incremental`` tells the consumer
to reconcile incrementally. Owned by one consumer, on its loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from strom.client.cluster import Cluster
from strom.client.consumer.assignors import Assignor, Member
from strom.client.consumer.member import JoinResult, MemberState
from strom.client.consumer_protocol import ConsumerAssignment, ConsumerSubscription
from strom.client.coordinators import MOVED_CODES, CoordinatorFinder
from strom.client.group_admin import GroupAdmin
from strom.client.metadata import uuid_text
from strom.common.errors import KafkaError, NetworkError, error_class, error_for
from strom.common.types import TopicPartition, kafka_uuid, parse_kafka_uuid
from strom.protocol.versions import ApiKey

log = logging.getLogger("strom.client.consumer")

#: Errors after which the member's partitions are lost and it joins again (same id).
_LOST = frozenset(error_class(name).code for name in (
    "FENCED_MEMBER_EPOCH", "UNKNOWN_MEMBER_ID"))
#: Errors no retry cures.
_FATAL = frozenset(error_class(name).code for name in (
    "FENCED_INSTANCE_ID", "UNRELEASED_INSTANCE_ID", "UNSUPPORTED_ASSIGNOR",
    "INVALID_REGULAR_EXPRESSION", "GROUP_MAX_SIZE_REACHED", "GROUP_AUTHORIZATION_FAILED",
    "INVALID_REQUEST"))
_LOADING = error_class("COORDINATOR_LOAD_IN_PROGRESS").code
_STALE = error_class("STALE_MEMBER_EPOCH").code

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
#: The heartbeat interval before the broker has named one.
DEFAULT_INTERVAL_MS = 5000


class ConsumerProtocolMember:
    """The KIP-848 membership of one consumer (see the module doc)."""

    incremental = True
    is_leader = False

    def __init__(self, finder: CoordinatorFinder, admin: GroupAdmin, cluster: Cluster,
                 group_id: str, *, group_instance_id: str | None, rebalance_timeout_ms: int,
                 request_timeout_s: float, server_assignor: str | None = None,
                 rack_id: str | None = None) -> None:
        self.finder = finder
        self.admin = admin
        self.cluster = cluster
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.request_timeout_s = request_timeout_s
        self.server_assignor = server_assignor
        self.rack_id = rack_id or None
        self.member_id = kafka_uuid(uuid.uuid4())
        self.member_epoch = JOIN_EPOCH
        self.protocol: str | None = "consumer"
        self.interval_ms = DEFAULT_INTERVAL_MS
        self.fatal: KafkaError | None = None
        self.rejoin_needed = True
        self._lost = False
        #: the assignment the broker wants (None: not known yet / lost)
        self.target: frozenset[TopicPartition] | None = None
        self._owned: frozenset[TopicPartition] = frozenset()
        self._sent_owned: frozenset[TopicPartition] | None = None
        self._topics: tuple[str, ...] = ()
        self._sent_topics: tuple[str, ...] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._answered = asyncio.Event()
        self.poll_expired: Callable[[], bool] = lambda: False

    # -- what the consumer asks --------------------------------------------------------------
    @property
    def generation(self) -> tuple[int, str] | None:
        """``(member epoch, member id)`` while a member; None otherwise."""
        return (self.member_epoch, self.member_id) if self.member_epoch > 0 else None

    def needs_join(self) -> bool:
        return self.rejoin_needed or (self.target is not None and self.target != self._owned)

    def request_rejoin(self, reason: str) -> None:
        """The subscription changed: the next heartbeat carries it (no rejoin needed)."""
        log.debug("group %s: %s", self.group_id, reason)
        self.rejoin_needed = True
        self._wake.set()

    def generation_lost(self) -> bool:
        return self._lost

    @property
    def generation_id(self) -> int:
        """The member epoch (what transactional offset commits carry as the generation)."""
        return self.member_epoch if self.member_epoch > 0 else -1

    @property
    def state(self) -> MemberState:
        if self.member_epoch > 0:
            return MemberState.STABLE
        running = self._heartbeat is not None and not self._heartbeat.done()
        return MemberState.REBALANCING if running else MemberState.UNJOINED

    def reset_generation(self, *, reset_member_id: bool) -> None:
        """A commit found the member gone: its partitions are lost; it joins again (with
        the same id: KIP-848 ids are the client's)."""
        del reset_member_id
        self._lose()

    def owned_now(self, partitions: set[TopicPartition]) -> None:
        """The consumer applied an assignment: report it at once."""
        self._owned = frozenset(partitions)
        self._wake.set()

    # -- join = reconcile towards the broker's target ----------------------------------------
    async def join(self, subscription: Callable[[Assignor], ConsumerSubscription],
                   assign: Callable[[Assignor, Sequence[Member]], Any]) -> JoinResult:
        """Send the subscription (joining first if not a member) and return the target to
        reconcile towards; raises a fatal error."""
        del assign  # the broker assigns
        topics = tuple(sorted(subscription(_NO_ASSIGNOR).topics))
        if topics != self._topics:
            self._topics = topics
            self._wake.set()
        if self._lost:
            self._owned = frozenset()
            self._lost = False
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.create_task(
                self._heartbeat_loop(), name=f"strom-consumer-heartbeat-{self.group_id}")
        while True:
            if self.fatal is not None:
                raise self.fatal
            if self._heartbeat.done() and not self._heartbeat.cancelled():
                self._heartbeat.result()
            if self.target is not None and self.member_epoch > 0:
                break
            self._answered.clear()
            if self.target is not None and self.member_epoch > 0:
                continue
            waiter = asyncio.ensure_future(self._answered.wait())
            try:
                await asyncio.wait([waiter, self._heartbeat],
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
        self.rejoin_needed = False
        return JoinResult(self.member_epoch, self.member_id, "consumer",
                          ConsumerAssignment(tuple(sorted(self.target))), False)

    # -- heartbeats --------------------------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        backoff = 0.1
        while True:
            answered = False
            if self.poll_expired() and self.member_epoch > 0:
                log.warning("group %s: no poll within max.poll.interval.ms; leaving the group",
                            self.group_id)
                await self._send_leave("consumer poll timeout has expired")
                self._lose()
                return
            try:
                await self._heartbeat_once()
                answered = True
                backoff = 0.1
                delay = self.interval_ms / 1000
            except KafkaError as exc:
                wait = self._on_error(exc, backoff)
                if wait is None:
                    return
                delay, backoff = wait, min(backoff * 2, 1.0)
            except NetworkError as exc:
                self.finder.forget(self.group_id)
                log.debug("group %s: heartbeat failed: %s", self.group_id, exc)
                delay, backoff = backoff, min(backoff * 2, 1.0)
            self._wake.clear()
            if answered and (self._owned != self._sent_owned
                             or self._topics != self._sent_topics):
                continue  # something to tell the broker now
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()

    def _on_error(self, exc: KafkaError, backoff: float) -> float | None:
        """Seconds before the next heartbeat, or None to stop (fatal)."""
        if exc.code in _FATAL:
            self.fatal = exc
            self._answered.set()
            return None
        if exc.code in _LOST:
            log.info("group %s: heartbeat says %s; partitions lost, joining again",
                     self.group_id, exc.name)
            self._lose()
            return 0.0
        if exc.code in MOVED_CODES:
            self.finder.forget(self.group_id)
        elif exc.code != _LOADING and not exc.retriable:
            self.fatal = exc
            self._answered.set()
            return None
        log.debug("group %s: heartbeat failed: %s", self.group_id, exc)
        return backoff

    def _lose(self) -> None:
        self.member_epoch = JOIN_EPOCH
        self.target = None
        self._lost = True
        self.rejoin_needed = True
        self._sent_owned = self._sent_topics = None
        self._answered.set()

    async def _heartbeat_once(self) -> None:
        node = await self.finder.find(self.group_id)
        conn = await self.finder.connect(node)
        joining = self.member_epoch == JOIN_EPOCH
        owned = frozenset() if joining else self._owned
        fields: dict[str, Any] = {
            "group_id": self.group_id, "member_id": self.member_id,
            "member_epoch": self.member_epoch,
            "rebalance_timeout_ms": self.rebalance_timeout_ms if joining else -1,
        }
        if joining:
            fields.update(instance_id=self.group_instance_id, rack_id=self.rack_id,
                          server_assignor=self.server_assignor)
        if joining or self._topics != self._sent_topics:
            fields["subscribed_topic_names"] = list(self._topics)
        if joining or owned != self._sent_owned:
            ids = self._topic_ids({tp.topic for tp in owned})
            by_topic: dict[str, list[int]] = {}
            for tp in sorted(owned):
                if tp.topic in ids:
                    by_topic.setdefault(tp.topic, []).append(tp.partition)
            fields["topic_partitions"] = [{"topic_id": ids[t], "partitions": ps}
                                          for t, ps in by_topic.items()]
        topics, sent_owned = self._topics, owned
        response = await conn.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, fields, version=1)
        if response.error_code:
            raise error_for(response.error_code, response.error_message
                            or f"ConsumerGroupHeartbeat of group {self.group_id!r}")
        self._sent_topics, self._sent_owned = topics, sent_owned
        self.member_epoch = int(response.member_epoch)
        if response.heartbeat_interval_ms > 0:
            self.interval_ms = int(response.heartbeat_interval_ms)
        if response.assignment is not None:
            self.target = await self._names(response.assignment.topic_partitions)
        elif self.target is None and not joining:
            self.target = self._owned  # a member whose assignment did not change
        self._answered.set()

    def _topic_ids(self, topics: set[str]) -> dict[str, uuid.UUID]:
        out = {}
        for name in topics:
            meta = self.cluster.metadata.topics.get(name)
            if meta is not None and meta.topic_id:
                out[name] = parse_kafka_uuid(meta.topic_id)
        return out

    async def _names(self, assignment: Any) -> frozenset[TopicPartition]:
        """The assignment by topic name (metadata refreshed for ids it does not know)."""
        def resolve() -> tuple[dict[str, str], bool]:
            names = {meta.topic_id: name for name, meta in self.cluster.metadata.topics.items()
                     if meta.topic_id}
            return names, all(uuid_text(t.topic_id) in names for t in assignment)

        names, complete = resolve()
        if not complete:
            await self.cluster.refresh(None)
            names, _ = resolve()
        return frozenset(TopicPartition(names[text], p) for t in assignment
                         if (text := uuid_text(t.topic_id)) in names for p in t.partitions)

    # -- offsets, leaving --------------------------------------------------------------------
    async def commit(self, offsets: Mapping[TopicPartition, Any], generation: tuple[int, str]
                     ) -> None:
        """OffsetCommit at ``generation``'s epoch; STALE_MEMBER_EPOCH (a heartbeat moved the
        epoch meanwhile) is retried at the member's current epoch, as the Java consumer does,
        while the member is still one."""
        epoch, member_id = generation
        for _ in range(3):
            try:
                await self.admin.commit_offsets(self.group_id, offsets, generation_id=epoch,
                                                member_id=member_id,
                                                group_instance_id=self.group_instance_id)
                return
            except KafkaError as exc:
                if exc.code != _STALE or epoch < 0 or self.member_epoch <= 0:
                    raise
                epoch = self.member_epoch
        await self.admin.commit_offsets(self.group_id, offsets, generation_id=epoch,
                                        member_id=member_id,
                                        group_instance_id=self.group_instance_id)

    async def _send_leave(self, reason: str) -> None:
        epoch = STATIC_LEAVE_EPOCH if self.group_instance_id is not None else LEAVE_EPOCH
        try:
            node = await self.finder.find(self.group_id, timeout_s=self.request_timeout_s)
            conn = await self.finder.connect(node)
            response = await conn.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, {
                "group_id": self.group_id, "member_id": self.member_id, "member_epoch": epoch,
                "instance_id": self.group_instance_id, "rebalance_timeout_ms": -1},
                version=1)
            if response.error_code:
                log.info("group %s: leaving answered %s", self.group_id,
                         error_for(response.error_code).name)
        except (KafkaError, NetworkError) as exc:
            log.info("group %s: leaving failed (%s): %s", self.group_id, reason, exc)

    def _stop(self) -> asyncio.Task[None] | None:
        task, self._heartbeat = self._heartbeat, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        return task

    async def leave(self, reason: str) -> None:
        """Leave the group (epoch -1, or -2 for a static member) and forget the epoch."""
        self._stop()
        if self.member_epoch > 0:
            await self._send_leave(reason)
        self.member_epoch = JOIN_EPOCH
        self.target = None
        self.rejoin_needed = True
        self._sent_owned = self._sent_topics = None

    async def close(self, *, leave: bool) -> None:
        task = self._stop()
        if task is not None and task is not asyncio.current_task():
            await asyncio.wait([task])
        if leave or self.group_instance_id is not None:
            await self.leave("the consumer is being closed")


class _NoAssignor:
    """Stands for an assignor where the consumer's subscription builder asks for one."""

    name = "consumer"
    cooperative = True

    def user_data(self, *_args: object) -> None:
        return None


_NO_ASSIGNOR: Any = _NoAssignor()
