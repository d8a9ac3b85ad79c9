"""One consumer's membership in a classic group: join, sync, heartbeat, leave (client side).

Kafka's classic group protocol as the Java consumer runs it:

1. FindCoordinator for the group id (:class:`~strom.client.coordinators.CoordinatorFinder`);
   NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / a lost connection drop the cached node.
2. JoinGroup with the member's subscription once per assignor (protocol type ``consumer``).
   A new dynamic member first gets MEMBER_ID_REQUIRED (KIP-394, JoinGroup v4+) with its id
   and joins again with it. The broker answers when every member has (re)joined, within the
   rebalance timeout (``max.poll.interval.ms``).
3. SyncGroup: the leader sends every member's assignment (computed by the chosen
   assignor); every member gets its own back.
4. Heartbeat every ``heartbeat.interval.ms`` from a background task while stable. Answers:
   REBALANCE_IN_PROGRESS → rejoin (partitions still owned); ILLEGAL_GENERATION → rejoin with
   partitions lost; UNKNOWN_MEMBER_ID → the same and a new member id; FENCED_INSTANCE_ID → a
   fatal error raised from the next poll.
5. LeaveGroup on close (dynamic members only: a static member, ``group.instance.id``, keeps
   its place for ``session.timeout.ms`` so a restart within it causes no rebalance), and when
   the application has not polled for ``max.poll.interval.ms``.

States (:class:`MemberState`): UNJOINED → (join) → REBALANCING → (sync) → STABLE; any error
that invalidates the generation returns to UNJOINED. :attr:`GroupMember.generation` is
``(generation id, member id)`` only while STABLE, which is what commits need.

Lifecycle: owned by one :class:`~strom.client.consumer.consumer.Consumer`, on its loop. The
heartbeat task is started by :meth:`GroupMember.join` and cancelled by ``leave`` / ``close``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from strom.client.consumer.assignors import Assignor, Member
from strom.client.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerAssignment,
    ConsumerSubscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from strom.client.coordinators import MOVED_CODES, CoordinatorFinder
from strom.client.group_admin import GroupAdmin
from strom.common.errors import KafkaError, NetworkError, error_class, error_for
from strom.common.types import TopicPartition
from strom.protocol.versions import ApiKey

log = logging.getLogger("strom.client.consumer")

MemberIdRequiredError = error_class("MEMBER_ID_REQUIRED")
UnknownMemberIdError = error_class("UNKNOWN_MEMBER_ID")
IllegalGenerationError = error_class("ILLEGAL_GENERATION")
RebalanceInProgressError = error_class("REBALANCE_IN_PROGRESS")
FencedInstanceIdError = error_class("FENCED_INSTANCE_ID")
CoordinatorLoadInProgressError = error_class("COORDINATOR_LOAD_IN_PROGRESS")

#: Errors after which the member must join again with a new member id.
_RESET_MEMBER = frozenset({UnknownMemberIdError.code})
#: Errors after which the member's generation (and so its partitions) is gone.
_LOST = frozenset({UnknownMemberIdError.code, IllegalGenerationError.code})
#: Errors that only mean "join again".
_REJOIN = frozenset({RebalanceInProgressError.code, CoordinatorLoadInProgressError.code,
                     *MOVED_CODES})

NO_GENERATION = -1


class MemberState(enum.Enum):
    UNJOINED = "unjoined"
    REBALANCING = "rebalancing"
    STABLE = "stable"


@dataclass(frozen=True, slots=True)
class JoinResult:
    """What one completed join + sync gave this member."""

    generation_id: int
    member_id: str
    protocol: str
    assignment: ConsumerAssignment
    leader: bool


class GroupMember:
    """The group protocol state of one consumer (see the module doc)."""

    def __init__(
        self,
        finder: CoordinatorFinder,
        admin: GroupAdmin,
        group_id: str,
        assignors: Sequence[Assignor],
        *,
        group_instance_id: str | None,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        heartbeat_interval_ms: int,
        request_timeout_s: float,
    ) -> None:
        self.finder = finder
        self.admin = admin
        self.group_id = group_id
        self.assignors = list(assignors)
        self.group_instance_id = group_instance_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.request_timeout_s = request_timeout_s
        self.member_id = ""
        self.generation_id = NO_GENERATION
        self.protocol: str | None = None
        self.state = MemberState.UNJOINED
        self.rejoin_needed = True
        self.fatal: KafkaError | None = None
        self.is_leader = False
        self._heartbeat: asyncio.Task[None] | None = None
        #: Set by the owner: called on the heartbeat task when the poll interval has passed.
        self.poll_expired: Callable[[], bool] = lambda: False

    # -- state -------------------------------------------------------------------------------
    @property
    def generation(self) -> tuple[int, str] | None:
        """``(generation id, member id)`` while STABLE; None otherwise."""
        if self.state is not MemberState.STABLE:
            return None
        return self.generation_id, self.member_id

    def needs_join(self) -> bool:
        return self.rejoin_needed or self.state is not MemberState.STABLE

    def request_rejoin(self, reason: str) -> None:
        if not self.rejoin_needed:
            log.info("group %s: rejoining (%s)", self.group_id, reason)
        self.rejoin_needed = True

    def reset_generation(self, *, reset_member_id: bool) -> None:
        """Forget the generation (its partitions are lost); optionally the member id."""
        self.generation_id = NO_GENERATION
        self.state = MemberState.UNJOINED
        self.rejoin_needed = True
        if reset_member_id:
            self.member_id = ""

    def generation_lost(self) -> bool:
        """Whether the last generation ended without a clean revoke (partitions lost)."""
        return self.generation_id == NO_GENERATION

    # -- join + sync -------------------------------------------------------------------------
    async def join(
        self, subscription: Callable[[Assignor], ConsumerSubscription],
        assign: Callable[[Assignor, Sequence[Member]], Any],
    ) -> JoinResult:
        """Join and sync until a generation is complete; returns this member's assignment.

        ``subscription(assignor)`` builds the member's subscription for one protocol;
        ``assign`` (awaitable) runs when this member is the leader."""
        self._stop_heartbeat()
        backoff = 0.1
        while True:
            if self.fatal is not None:
                raise self.fatal
            try:
                result = await self._join_once(subscription, assign)
            except KafkaError as exc:
                if exc.code == FencedInstanceIdError.code:
                    self.fatal = exc
                    raise
                if exc.code in MOVED_CODES or isinstance(exc, NetworkError):
                    self.finder.forget(self.group_id)
                if exc.code in _RESET_MEMBER:
                    self.member_id = ""
                if exc.code in _LOST:
                    self.generation_id = NO_GENERATION
                if not (exc.retriable or exc.code in _REJOIN or exc.code in _LOST):
                    self.state = MemberState.UNJOINED
                    raise
                log.debug("group %s: join failed (%s); retrying", self.group_id, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            self.state = MemberState.STABLE
            self.rejoin_needed = False
            self._start_heartbeat()
            return result

    async def _join_once(
        self, subscription: Callable[[Assignor], ConsumerSubscription],
        assign: Callable[[Assignor, Sequence[Member]], Any],
    ) -> JoinResult:
        self.state = MemberState.REBALANCING
        node = await self.finder.find(self.group_id)
        conn = await self.finder.connect(node)
        version = conn.version(ApiKey.JOIN_GROUP)
        protocols = [{"name": a.name, "metadata": encode_subscription(subscription(a))}
                     for a in self.assignors]
        while True:
            fields: dict[str, Any] = {
                "group_id": self.group_id,
                "session_timeout_ms": self.session_timeout_ms,
                "member_id": self.member_id,
                "protocol_type": CONSUMER_PROTOCOL_TYPE,
                "protocols": protocols,
            }
            if version >= 1:
                fields["rebalance_timeout_ms"] = self.rebalance_timeout_ms
            if version >= 5:
                fields["group_instance_id"] = self.group_instance_id
            timeout = max(self.request_timeout_s, self.rebalance_timeout_ms / 1000 + 5)
            response = await conn.request(ApiKey.JOIN_GROUP, fields, version=version,
                                          timeout_s=timeout)
            if response.error_code == MemberIdRequiredError.code:
                # KIP-394: the coordinator named our member id; join again with it.
                self.member_id = response.member_id
                continue
            if response.error_code:
                raise error_for(response.error_code, f"JoinGroup of group {self.group_id!r}")
            break
        self.member_id = response.member_id
        self.generation_id = response.generation_id
        self.protocol = response.protocol_name
        self.is_leader = response.leader == response.member_id
        assignor = next((a for a in self.assignors if a.name == self.protocol), None)
        if assignor is None:
            raise error_for(error_class("INCONSISTENT_GROUP_PROTOCOL").code,
                            f"group {self.group_id!r} chose protocol {self.protocol!r}, "
                            "which this consumer does not offer")
        assignments: list[dict[str, Any]] = []
        # KIP-814: a static leader rejoining is told to keep the current assignment.
        if self.is_leader and not getattr(response, "skip_assignment", False):
            members = [Member(m.member_id, decode_subscription(m.metadata),
                              getattr(m, "group_instance_id", None))
                       for m in response.members]
            plan = await assign(assignor, members)
            assignments = [{"member_id": mid,
                            "assignment": encode_assignment(ConsumerAssignment(tuple(tps)))}
                           for mid, tps in plan.items()]
        sync_version = conn.version(ApiKey.SYNC_GROUP)
        sync: dict[str, Any] = {
            "group_id": self.group_id,
            "generation_id": self.generation_id,
            "member_id": self.member_id,
            "assignments": assignments,
        }
        if sync_version >= 3:
            sync["group_instance_id"] = self.group_instance_id
        if sync_version >= 5:
            sync["protocol_type"] = CONSUMER_PROTOCOL_TYPE
            sync["protocol_name"] = self.protocol
        answer = await conn.request(ApiKey.SYNC_GROUP, sync, version=sync_version,
                                    timeout_s=timeout)
        if answer.error_code:
            raise error_for(answer.error_code, f"SyncGroup of group {self.group_id!r}")
        return JoinResult(self.generation_id, self.member_id, assignor.name,
                          decode_assignment(answer.assignment or b""), self.is_leader)

    # -- heartbeats --------------------------------------------------------------------------
    def _start_heartbeat(self) -> None:
        self._stop_heartbeat()
        self._heartbeat = asyncio.create_task(self._heartbeat_loop(),
                                              name=f"strom-heartbeat-{self.group_id}")

    def _stop_heartbeat(self) -> None:
        task, self._heartbeat = self._heartbeat, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _heartbeat_loop(self) -> None:
        interval = self.heartbeat_interval_ms / 1000
        # Only the member's current heartbeat task heartbeats: one whose cancel was lost
        # stops at its next turn once _stop_heartbeat has dropped it.
        while self.state is MemberState.STABLE and self._heartbeat is asyncio.current_task():
            await asyncio.sleep(interval)
            if self.poll_expired():
                log.warning("group %s: no poll within max.poll.interval.ms; leaving the group "
                            "(the next commit fails)", self.group_id)
                await self.leave("consumer poll timeout has expired")
                return
            try:
                await self._heartbeat_once()
            except KafkaError as exc:
                if exc.code == FencedInstanceIdError.code:
                    self.fatal = exc
                    self.reset_generation(reset_member_id=False)
                    return
                if exc.code in _LOST:
                    log.info("group %s: heartbeat says %s; partitions lost", self.group_id,
                             exc.name)
                    self.reset_generation(reset_member_id=exc.code in _RESET_MEMBER)
                    return
                if exc.code == RebalanceInProgressError.code:
                    self.request_rejoin("the group is rebalancing")
                    continue
                if exc.code in MOVED_CODES or isinstance(exc, NetworkError):
                    self.finder.forget(self.group_id)
                log.debug("group %s: heartbeat failed: %s", self.group_id, exc)

    async def _heartbeat_once(self) -> None:
        node = await self.finder.find(self.group_id)
        conn = await self.finder.connect(node)
        fields: dict[str, Any] = {"group_id": self.group_id,
                                  "generation_id": self.generation_id,
                                  "member_id": self.member_id}
        version = conn.version(ApiKey.HEARTBEAT)
        if version >= 3:
            fields["group_instance_id"] = self.group_instance_id
        response = await conn.request(ApiKey.HEARTBEAT, fields, version=version)
        if response.error_code:
            raise error_for(response.error_code, f"Heartbeat in group {self.group_id!r}")

    # -- offsets -----------------------------------------------------------------------------
    async def commit(self, offsets: Mapping[TopicPartition, Any], generation: tuple[int, str]
                     ) -> None:
        generation_id, member_id = generation
        await self.admin.commit_offsets(self.group_id, offsets, generation_id=generation_id,
                                        member_id=member_id,
                                        group_instance_id=self.group_instance_id)

    # -- leaving -----------------------------------------------------------------------------
    async def leave(self, reason: str) -> None:
        """Leave the group (LeaveGroup for a dynamic member) and forget the generation."""
        self._stop_heartbeat()
        member_id = self.member_id
        dynamic = self.group_instance_id is None
        self.reset_generation(reset_member_id=True)
        if not dynamic or not member_id:
            return
        try:
            node = await self.finder.find(self.group_id, timeout_s=self.request_timeout_s)
            conn = await self.finder.connect(node)
            version = conn.version(ApiKey.LEAVE_GROUP)
            fields: dict[str, Any] = {"group_id": self.group_id}
            if version >= 3:
                member: dict[str, Any] = {"member_id": member_id, "group_instance_id": None}
                if version >= 5:
                    member["reason"] = reason
                fields["members"] = [member]
            else:
                fields["member_id"] = member_id
            response = await conn.request(ApiKey.LEAVE_GROUP, fields, version=version)
            if response.error_code:
                log.info("group %s: LeaveGroup answered %s", self.group_id,
                         error_for(response.error_code).name)
        except (KafkaError, NetworkError) as exc:
            log.info("group %s: LeaveGroup failed: %s", self.group_id, exc)

    async def close(self, *, leave: bool) -> None:
        task = self._heartbeat
        self._stop_heartbeat()
        if task is not None and task is not asyncio.current_task():
            # asyncio.wait, not ``await task`` under suppress(CancelledError): a cancel of
            # the caller (a close() bounded by a timeout) must propagate, not be swallowed.
            await asyncio.wait([task])
            if not task.cancelled():
                task.result()
        if leave:
            await self.leave("the consumer is being closed")

