"""One ``__consumer_offsets`` partition's KIP-848 consumer groups: ConsumerGroupHeartbeat,
ConsumerGroupDescribe, member expiry, and the member-epoch checks of offset commits.

Every operation on a group runs after the previous one's write has resolved (a queue per
group id): an operation reads the replayed state, computes the records that move it (Kafka's
record types 3, 5, 6, 7, 8 — see :mod:`.records`), writes them as one batch, and answers once
they are committed and replayed (:func:`.model.apply`), from the state replay produced. So
memory is always a replay of the log, and two heartbeats of one group never compute from the
same state. An operation whose write fails answers Kafka's coordinator error; one whose write
times out answers COORDINATOR_NOT_AVAILABLE, but the group stays blocked until the write
resolves (its records may still commit).

A heartbeat (``GroupMetadataManager.consumerGroupHeartbeat`` in Kafka):

1. checks the request (INVALID_REQUEST with Kafka's messages, UNSUPPORTED_ASSIGNOR,
   INVALID_REGULAR_EXPRESSION) and the member: epoch 0 joins (or rejoins) — v1 members
   bring their own id, v0 members get one; a positive epoch must be the member's (or its
   previous epoch, if the partitions it owns are still its own: a lost response), else
   FENCED_MEMBER_EPOCH; an unknown member is UNKNOWN_MEMBER_ID; -1 leaves, -2 leaves for now
   (a static member, which keeps its partitions until its session expires or it returns);
   a static member's instance id held by a member that has not left is UNRELEASED_INSTANCE_ID;
2. bumps the group epoch when a member joins, leaves or changes its subscription, or when
   the subscribed topics' partitions changed (topics created, deleted, grown);
3. computes a new target assignment when the group epoch is past the assignment epoch
   (:mod:`.assignors`, the assignor most members ask for, else ``uniform``);
4. moves the member towards its target (:mod:`.reconcile`) and answers its epoch and, when
   it changed or the member (re)joined, its assignment.

Sessions: a member that does not heartbeat for ``group.consumer.session.timeout.ms`` is
removed (its records tombstoned, the group epoch bumped); one that keeps partitions pending
revocation longer than its rebalance timeout is removed too (Kafka fences it the same way).
Owned by the broker's event-loop thread.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from strom.client.consumer_protocol import (
    ConsumerAssignment,
    ConsumerSubscription,
    encode_assignment,
    encode_subscription,
)
from strom.common.clock import Clock
from strom.common.errors import KafkaError
from strom.common.patterns import PatternError, compile_pattern
from strom.common.timer import Scheduler
from strom.common.types import TopicPartition, kafka_uuid
from strom.coordinator.group.codes import (
    FENCED_INSTANCE_ID,
    FENCED_MEMBER_EPOCH,
    GROUP_ID_NOT_FOUND,
    GROUP_MAX_SIZE_REACHED,
    ILLEGAL_GENERATION,
    INVALID_REGULAR_EXPRESSION,
    INVALID_REQUEST,
    NON_EMPTY_GROUP,
    STALE_MEMBER_EPOCH,
    UNKNOWN_MEMBER_ID,
    UNRELEASED_INSTANCE_ID,
    UNSUPPORTED_ASSIGNOR,
)
from strom.coordinator.group.consumer.assignors import assign
from strom.coordinator.group.consumer.model import (
    LEAVE_GROUP_STATIC_EPOCH,
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    GroupState,
    MemberState,
    apply,
    assignment_value,
    to_wire,
)
from strom.coordinator.group.consumer.reconcile import reconcile
from strom.coordinator.group.consumer.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerKey,
    ConsumerValue,
    encode_consumer_key,
    encode_consumer_value,
)
from strom.coordinator.group.consumer.settings import ASSIGNORS, ConsumerSettings
from strom.coordinator.group.model import GroupSummary, MemberSummary
from strom.coordinator.runtime import (
    NOT_COORDINATOR,
    UNKNOWN_SERVER_ERROR,
    ShardContext,
    coordinator_error,
)
from strom.metadata.image import TopicInfo

log = logging.getLogger("strom.coordinator.group.consumer")


LEAVE_GROUP_EPOCH = -1

Record = tuple[ConsumerKey, ConsumerValue | None]
Topics = Callable[[], Mapping[str, TopicInfo]]


@dataclass(frozen=True, slots=True)
class HeartbeatArgs:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    subscribed_topic_names: tuple[str, ...] | None
    subscribed_topic_regex: str | None
    server_assignor: str | None
    owned: Assignment | None
    client_id: str = ""
    client_host: str = ""
    version: int = 1


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: int
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


HeartbeatCallback = Callable[[HeartbeatResult], None]


class _Refused(Exception):
    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ConsumerGroups:
    """The consumer groups of one shard. ``is_classic(group_id)`` says whether a classic
    group with members (or in a rebalance) holds the id: such a group is not a consumer
    group (online migration between the protocols is not built: see docs/protocol.md)."""

    def __init__(self, context: ShardContext, scheduler: Scheduler, clock: Clock,
                 settings: ConsumerSettings, topics: Topics,
                 is_classic: Callable[[str], bool]) -> None:
        self.context = context
        self.scheduler = scheduler
        self.clock = clock
        self.settings = settings
        self.topics = topics
        self.is_classic = is_classic
        self.groups: dict[str, ConsumerGroup] = {}
        self._busy: set[str] = set()
        self._queues: dict[str, list[Callable[[], None]]] = {}
        self.loaded = False
        self.closed = False

    # -- runtime callbacks --------------------------------------------------------------------
    def replay(self, key: ConsumerKey, value: ConsumerValue | None) -> None:
        apply(self.groups, key, value)

    def on_loaded(self) -> None:
        self.loaded = True
        for group in self.groups.values():
            for member in group.members.values():
                self._schedule_session(group, member)
                self._schedule_revocation(group, member)

    def on_unloaded(self) -> None:
        self.closed = True
        for group in self.groups.values():
            for member in group.members.values():
                self._cancel_timers(member)
        queues, self._queues = self._queues, {}
        for queue in queues.values():
            for operation in queue:
                operation()  # each answers NOT_COORDINATOR (closed)

    # -- serialisation per group ---------------------------------------------------------------
    def _run(self, group_id: str, operation: Callable[[Callable[[], None]], None]) -> None:
        """Run ``operation(done)`` once no earlier operation of the group is in flight;
        ``operation`` calls ``done`` when its write (if any) resolved (once counts; an
        operation that raises is logged and releases the queue)."""
        def start() -> None:
            self._busy.add(group_id)
            released = False

            def done() -> None:
                nonlocal released
                if not released:
                    released = True
                    self._next(group_id)

            try:
                operation(done)
            except Exception:  # a bug must not leave the group's queue blocked for good
                log.exception("group %s: operation failed", group_id)
                done()

        if group_id in self._busy:
            self._queues.setdefault(group_id, []).append(start)
        else:
            start()

    def _next(self, group_id: str) -> None:
        self._busy.discard(group_id)
        queue = self._queues.get(group_id)
        if queue:
            operation = queue.pop(0)
            if not queue:
                del self._queues[group_id]
            operation()

    def _write(self, records: list[Record], on_commit: Callable[[], None],
               on_failure: Callable[[KafkaError], None],
               on_timeout: Callable[[KafkaError], None]) -> None:
        raw = [(encode_consumer_key(k), encode_consumer_value(v)) for k, v in records]
        self.context.write(raw, on_commit=on_commit, on_failure=on_failure,
                           on_timeout=on_timeout)

    # -- ConsumerGroupHeartbeat ----------------------------------------------------------------
    def heartbeat(self, args: HeartbeatArgs, callback: HeartbeatCallback) -> None:
        try:
            self._check_request(args)
        except _Refused as refused:
            return callback(HeartbeatResult(refused.code, refused.message))
        if not args.member_id and args.member_epoch == 0:  # v0: the coordinator names it
            args = replace(args, member_id=kafka_uuid(uuid.uuid4()))
        answered = [False]

        def answer(result: HeartbeatResult) -> None:
            if not answered[0]:
                answered[0] = True
                callback(result)

        def operation(done: Callable[[], None]) -> None:
            if self.closed:
                answer(HeartbeatResult(NOT_COORDINATOR))
                return done()
            try:
                self._heartbeat(args, answer, done)
            except _Refused as refused:
                answer(HeartbeatResult(refused.code, refused.message))
                done()
            except Exception:
                answer(HeartbeatResult(UNKNOWN_SERVER_ERROR))  # Kafka's unexpected error
                raise

        self._run(args.group_id, operation)
        return None

    def _check_request(self, args: HeartbeatArgs) -> None:
        if not args.group_id:
            raise _Refused(INVALID_REQUEST, "GroupId can't be empty.")
        if args.version >= 1 and not args.member_id:
            raise _Refused(INVALID_REQUEST, "MemberId can't be empty.")
        if args.instance_id is not None and not args.instance_id:
            raise _Refused(INVALID_REQUEST, "InstanceId can't be empty.")
        if args.rack_id is not None and not args.rack_id:
            raise _Refused(INVALID_REQUEST, "RackId can't be empty.")
        epoch = args.member_epoch
        if epoch == 0:
            if args.rebalance_timeout_ms == -1:
                raise _Refused(INVALID_REQUEST,
                               "RebalanceTimeoutMs must be provided in first request.")
            if args.owned is None or any(args.owned.values()):
                raise _Refused(INVALID_REQUEST,
                               "TopicPartitions must be empty when (re-)joining.")
            if args.subscribed_topic_names is None and args.subscribed_topic_regex is None:
                raise _Refused(INVALID_REQUEST, "Either SubscribedTopicNames or "
                               "SubscribedTopicRegex must be non-null when (re-)joining.")
        elif epoch == LEAVE_GROUP_STATIC_EPOCH:
            if args.instance_id is None:
                raise _Refused(INVALID_REQUEST, "InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_EPOCH:
            raise _Refused(INVALID_REQUEST, "MemberEpoch is invalid.")
        if args.server_assignor is not None and (
                args.server_assignor not in self.settings.assignors):
            raise _Refused(UNSUPPORTED_ASSIGNOR,
                           f"ServerAssignor {args.server_assignor} is not supported. "
                           f"Supported assignors: {', '.join(self.settings.assignors)}.")
        if args.subscribed_topic_regex:
            try:
                compile_pattern(args.subscribed_topic_regex)
            except PatternError as exc:
                raise _Refused(INVALID_REGULAR_EXPRESSION,
                               f"SubscribedTopicRegex `{args.subscribed_topic_regex}` is not "
                               f"a valid regular expression: {exc}.") from None

    def _heartbeat(self, args: HeartbeatArgs, answer: HeartbeatCallback,
                   done: Callable[[], None]) -> None:
        group_id, epoch = args.group_id, args.member_epoch
        if self.is_classic(group_id):
            raise _Refused(GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        group = self.groups.get(group_id)
        if epoch in (LEAVE_GROUP_EPOCH, LEAVE_GROUP_STATIC_EPOCH):
            return self._leave(group, args, answer, done)
        if group is None:
            if epoch != 0:
                raise _Refused(GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
            group = ConsumerGroup(group_id)
        records: list[Record] = []
        old = group.members.get(args.member_id)
        replaced: ConsumerMember | None = None
        if epoch == 0:
            member, replaced = self._joining(group, args, old)
            if replaced is not None:
                records += self._removal_records(group, replaced)
        else:
            if old is None:
                raise _Refused(UNKNOWN_MEMBER_ID, f"Member {args.member_id} is not a member "
                               f"of group {group_id}.")
            if args.instance_id is not None and old.instance_id != args.instance_id:
                raise _Refused(FENCED_INSTANCE_ID)
            if epoch != old.member_epoch and not (
                    epoch == old.previous_member_epoch and args.owned is not None
                    and _contains(old.assigned, args.owned)):
                raise _Refused(FENCED_MEMBER_EPOCH, f"The consumer group member has a "
                               f"{'smaller' if epoch < old.member_epoch else 'greater'} member "
                               f"epoch ({epoch}) than the one known by the group coordinator "
                               f"({old.member_epoch}). The member must abandon all its "
                               "partitions and rejoin.")
            member = _with_request(old, args)
        prior = old if old is not None else replaced  # a returning static member: its self
        bump = prior is None or _subscription(prior) != _subscription(member)
        if old is None or member.metadata_value() != old.metadata_value():
            records.append((ConsumerGroupMemberMetadataKey(group_id, member.member_id),
                            member.metadata_value()))
        members = dict(group.members)
        members[member.member_id] = member
        for gone in [r for r in members.values() if _replaced_by(r, member)]:
            del members[gone.member_id]
        topics = self.topics()
        # Resolving every member's subscription is O(members) (regexes: O(topics) each):
        # reused while the metadata image and the stored subscriptions are the same and this
        # heartbeat changes none.
        reusable = not bump and replaced is None
        cached = group.resolved
        if reusable and cached is not None and cached[0] is topics and (
                cached[1] == group.subscription_version):
            resolved, snapshot = cached[2], cached[3]
        else:
            resolved = {m.member_id: _resolve(m, topics) for m in members.values()}
            snapshot = tuple(sorted((name, topics[name].topic_id, len(topics[name].partitions))
                                    for name in set().union(*resolved.values())))
            if reusable:
                group.resolved = (topics, group.subscription_version, resolved, snapshot)
        if group.snapshot is None and _target_covers(group, snapshot):
            group.snapshot = snapshot  # loaded: the stored target already fits the topics
        if snapshot != group.snapshot:
            bump = True
        group_epoch = group.group_epoch + 1 if bump else group.group_epoch
        if bump:
            records.append((ConsumerGroupMetadataKey(group_id),
                            ConsumerGroupMetadataValue(group_epoch)))
        target_epoch, targets = group.assignment_epoch, dict(group.target)
        if group_epoch > group.assignment_epoch:
            ids = {name: info.topic_id for name, info in topics.items()}
            counts = {topics[name].topic_id: len(topics[name].partitions)
                      for name, _, _ in snapshot}
            new_targets = assign(chosen_assignor(members.values(), self.settings.assignors[0]),
                                 {m: frozenset(ids[n] for n in names)
                                  for m, names in resolved.items()}, counts, group.target)
            for member_id, target in new_targets.items():
                if _normal(target) != _normal(group.target.get(member_id, {})) or (
                        member_id not in group.target):
                    records.append((ConsumerGroupTargetAssignmentMemberKey(group_id, member_id),
                                    ConsumerGroupTargetAssignmentMemberValue(to_wire(target))))
            records.append((ConsumerGroupTargetAssignmentMetadataKey(group_id),
                            ConsumerGroupTargetAssignmentMetadataValue(group_epoch)))
            target_epoch, targets = group_epoch, dict(new_targets)
        elif replaced is not None:  # the returning static member keeps its target
            kept = group.target.get(replaced.member_id, {})
            targets[member.member_id] = kept
            records.append((ConsumerGroupTargetAssignmentMemberKey(group_id, member.member_id),
                            ConsumerGroupTargetAssignmentMemberValue(to_wire(kept))))

        def held_by_other(topic: uuid.UUID, partition: int) -> bool:
            owner = group.owner_of(topic, partition)
            return owner is not None and owner != member.member_id and owner in members

        nxt = reconcile(
            member_epoch=member.member_epoch, previous_member_epoch=member.previous_member_epoch,
            state=member.state, assigned=member.assigned,
            pending_revocation=member.pending_revocation, target_epoch=target_epoch,
            target=targets.get(member.member_id, {}), owned=args.owned,
            held_by_other=held_by_other)
        moved = replace_assignment(member, nxt)
        if old is None or assignment_value(moved) != assignment_value(old):
            records.append((ConsumerGroupCurrentMemberAssignmentKey(group_id, member.member_id),
                            assignment_value(moved)))
        full = epoch == 0 or old is None or _normal(moved.assigned) != _normal(old.assigned) \
            or (args.owned is not None and _normal(args.owned) != _normal(moved.assigned))

        def respond() -> None:
            current = self.groups.get(group_id)
            me = current.members.get(member.member_id) if current is not None else None
            if current is None or me is None:
                return answer(HeartbeatResult(UNKNOWN_MEMBER_ID, None, member.member_id,
                                              epoch))
            current.snapshot = snapshot
            self._schedule_session(current, me)
            self._schedule_revocation(current, me)
            answer(HeartbeatResult(
                0, None, me.member_id, me.member_epoch, self.settings.heartbeat_interval_ms,
                dict(me.assigned) if full else None))

        if not records:
            respond()
            return done()
        self._commit(records, respond, answer, done)
        return None

    def _joining(self, group: ConsumerGroup, args: HeartbeatArgs, old: ConsumerMember | None
                 ) -> tuple[ConsumerMember, ConsumerMember | None]:
        """The member joining with epoch 0, and the static member it replaces (if any)."""
        replaced = None
        if old is None and len(group.members) >= self.settings.max_size:
            raise _Refused(GROUP_MAX_SIZE_REACHED,
                           f"The consumer group has reached its maximum capacity of "
                           f"{self.settings.max_size} members.")
        base = old if old is not None else ConsumerMember(args.member_id)
        if args.instance_id is not None:
            holder = group.member_by_instance(args.instance_id)
            if holder is not None and holder.member_id != args.member_id:
                if holder.member_epoch != LEAVE_GROUP_STATIC_EPOCH:
                    raise _Refused(UNRELEASED_INSTANCE_ID,
                                   f"Static member {holder.member_id} with instance id "
                                   f"{args.instance_id} is not released yet.")
                replaced = holder  # a static member returns: it keeps the partitions
                base = replace_assignment(ConsumerMember(args.member_id), holder)
                base.member_epoch = holder.previous_member_epoch
        return _with_request(base, args), replaced

    # -- leaving, expiry -----------------------------------------------------------------------
    def _leave(self, group: ConsumerGroup | None, args: HeartbeatArgs,
               answer: HeartbeatCallback, done: Callable[[], None]) -> None:
        if group is None:
            raise _Refused(GROUP_ID_NOT_FOUND, f"Group {args.group_id} not found.")
        member = group.members.get(args.member_id)
        if args.member_epoch == LEAVE_GROUP_STATIC_EPOCH:
            holder = group.member_by_instance(args.instance_id or "")
            if holder is None:
                raise _Refused(UNKNOWN_MEMBER_ID, f"Instance id {args.instance_id} is unknown.")
            if holder.member_id != args.member_id:
                raise _Refused(FENCED_INSTANCE_ID, f"Static member {args.member_id} with "
                               f"instance id {args.instance_id} is fenced by member "
                               f"{holder.member_id}.")
        if member is None:
            raise _Refused(UNKNOWN_MEMBER_ID, f"Member {args.member_id} is not a member of "
                           f"group {args.group_id}.")
        if args.member_epoch == LEAVE_GROUP_STATIC_EPOCH:
            kept = replace_assignment(ConsumerMember(member.member_id), member)
            kept.previous_member_epoch = member.member_epoch
            kept.member_epoch = LEAVE_GROUP_STATIC_EPOCH
            records: list[Record] = [(ConsumerGroupCurrentMemberAssignmentKey(
                group.group_id, member.member_id), assignment_value(kept))]
        else:
            records = self._removal_records(group, member)
            records.append((ConsumerGroupMetadataKey(group.group_id),
                            ConsumerGroupMetadataValue(group.group_epoch + 1)))
        log.info("group %s: member %s left (epoch %d)", group.group_id, member.member_id,
                 args.member_epoch)

        def respond() -> None:
            current = self.groups.get(group.group_id)
            if current is not None and member.member_id not in current.members:
                self._cancel_timers(member)
            answer(HeartbeatResult(0, None, member.member_id, args.member_epoch, 0))

        self._commit(records, respond, answer, done)

    def _removal_records(self, group: ConsumerGroup, member: ConsumerMember) -> list[Record]:
        gid, mid = group.group_id, member.member_id
        return [(ConsumerGroupCurrentMemberAssignmentKey(gid, mid), None),
                (ConsumerGroupTargetAssignmentMemberKey(gid, mid), None),
                (ConsumerGroupMemberMetadataKey(gid, mid), None)]

    def _remove(self, group: ConsumerGroup, member: ConsumerMember, why: str) -> None:
        """Fence a member whose session expired or that did not revoke in time."""
        def operation(done: Callable[[], None]) -> None:
            current = self.groups.get(group.group_id)
            if self.closed or current is None or current.members.get(
                    member.member_id) is not member:
                return done()
            log.info("group %s: member %s removed: %s", group.group_id, member.member_id, why)
            self._cancel_timers(member)
            records = self._removal_records(current, member)
            records.append((ConsumerGroupMetadataKey(group.group_id),
                            ConsumerGroupMetadataValue(current.group_epoch + 1)))
            self._commit(records, lambda: None, lambda _result: None, done)
            return None

        self._run(group.group_id, operation)

    def _commit(self, records: list[Record], respond: Callable[[], None],
                answer: HeartbeatCallback, done: Callable[[], None]) -> None:
        def committed() -> None:
            try:
                respond()
            finally:
                done()

        def failed(exc: KafkaError) -> None:
            answer(HeartbeatResult(coordinator_error(exc)))
            done()

        def timed_out(exc: KafkaError) -> None:
            answer(HeartbeatResult(coordinator_error(exc)))  # still pending: stays blocked

        self._write(records, committed, failed, timed_out)

    # -- timers --------------------------------------------------------------------------------
    def _schedule_session(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        member.session_timer = self.scheduler.call_later(
            self.settings.session_timeout_ms,
            lambda: self._remove(group, member, "session timed out"))

    def _schedule_revocation(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if member.state is not MemberState.UNREVOKED_PARTITIONS:
            if member.revocation_timer is not None:
                member.revocation_timer.cancel()
                member.revocation_timer = None
            return
        if member.revocation_timer is None:
            member.revocation_timer = self.scheduler.call_later(
                member.rebalance_timeout_ms,
                lambda: self._remove(group, member, "partitions not revoked in time"))

    @staticmethod
    def _cancel_timers(member: ConsumerMember) -> None:
        for name in ("session_timer", "revocation_timer"):
            timer = getattr(member, name)
            if timer is not None:
                timer.cancel()
                setattr(member, name, None)

    # -- offsets, listing, describing, deleting --------------------------------------------
    def validate_commit(self, group_id: str, member_id: str, epoch: int,
                        stale_epoch_error: int, partitions: list[tuple[str, int]]
                        ) -> list[int] | None:
        """The OffsetCommit error of each partition for a consumer group (None: not a
        consumer group here), as Kafka 4.4 answers (measured): a commit without a member
        (admin tools) is accepted only while the group is empty; a member commits at its
        current epoch, or at an older one for a partition assigned to it since that epoch
        (KIP-1251: a commit racing a heartbeat that moved the epoch); anything else is
        ``stale_epoch_error`` (STALE_MEMBER_EPOCH from OffsetCommit v9, ILLEGAL_GENERATION
        before, which did not know member epochs)."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if not member_id and epoch < 0:
            return [0 if not group.members else UNKNOWN_MEMBER_ID] * len(partitions)
        member = group.members.get(member_id)
        if member is None:
            return [UNKNOWN_MEMBER_ID] * len(partitions)
        if epoch == member.member_epoch:
            return [0] * len(partitions)
        if epoch > member.member_epoch:
            return [stale_epoch_error] * len(partitions)
        topics = self.topics()
        out = []
        for topic, partition in partitions:
            info = topics.get(topic)
            since = member.assignment_epochs.get((info.topic_id, partition)) if info else None
            out.append(0 if since is not None and since <= epoch else stale_epoch_error)
        return out

    def validate_fetch(self, group_id: str, member_id: str, epoch: int) -> int:
        """OffsetFetch v9+ from a member of a consumer group: it must be a member at its
        current epoch (an admin's fetch, no member and epoch -1, is not checked)."""
        group = self.groups.get(group_id)
        if group is None or (not member_id and epoch < 0):
            return 0
        member = group.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        return 0 if epoch == member.member_epoch else STALE_MEMBER_EPOCH

    def validate_txn_commit(self, group_id: str, member_id: str, epoch: int) -> int | None:
        group = self.groups.get(group_id)
        if group is None or not member_id:
            return None
        member = group.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        return 0 if epoch == member.member_epoch else ILLEGAL_GENERATION

    def describe_classic(self, group_id: str) -> GroupSummary:
        """The group as DescribeGroups shows it (Kafka's ``ConsumerGroup.asDescribedGroup``):
        protocol type ``consumer``, the assignor as the protocol, each member's subscription
        and assignment in the classic embedded consumer protocol's formats."""
        group = self.groups[group_id]
        names = {info.topic_id: name for name, info in self.topics().items()}
        members = []
        for m in group.members.values():
            owned = tuple(TopicPartition(names[t], p) for t, ps in to_wire(m.assigned)
                          if t in names for p in ps)
            subscription = ConsumerSubscription(m.subscribed_topic_names, None, owned,
                                                rack_id=m.rack_id)
            members.append(MemberSummary(
                m.member_id, m.instance_id, m.client_id, m.client_host,
                encode_subscription(subscription), encode_assignment(
                    ConsumerAssignment(owned))))
        return GroupSummary(group_id, group.state().value, "consumer",
                            chosen_assignor(group.members.values(), self.settings.assignors[0]),
                            members)

    def subscribed_topics(self, group_id: str) -> set[str] | None:
        """The topics the group's members subscribe to, regular expressions resolved (empty:
        no members); None when this is not a consumer group."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        topics = self.topics()
        return set().union(*(_resolve(m, topics) for m in group.members.values()))

    def list_groups(self) -> list[tuple[str, str]]:
        """(group id, state) of each consumer group."""
        return [(g.group_id, g.state().value) for g in self.groups.values()]

    def deletion_records(self, group_id: str) -> list[Record] | int:
        """The tombstones that delete an empty consumer group, or NON_EMPTY_GROUP."""
        group = self.groups[group_id]
        if group.members:
            return NON_EMPTY_GROUP
        records: list[Record] = [(ConsumerGroupTargetAssignmentMemberKey(group_id, m), None)
                                 for m in group.target]
        records.append((ConsumerGroupTargetAssignmentMetadataKey(group_id), None))
        records.append((ConsumerGroupMetadataKey(group_id), None))
        return records


# -- pure helpers ------------------------------------------------------------------------------
def replace_assignment(member: ConsumerMember, nxt: object) -> ConsumerMember:
    """A copy of ``member`` with the assignment fields of ``nxt`` (a reconcile result or
    another member)."""
    out = ConsumerMember(
        member.member_id, member.instance_id, member.rack_id, member.client_id,
        member.client_host, member.subscribed_topic_names, member.subscribed_topic_regex,
        member.rebalance_timeout_ms, member.server_assignor)
    out.member_epoch = nxt.member_epoch  # type: ignore[attr-defined]
    out.previous_member_epoch = nxt.previous_member_epoch  # type: ignore[attr-defined]
    out.state = nxt.state  # type: ignore[attr-defined]
    out.assigned = dict(nxt.assigned)  # type: ignore[attr-defined]
    out.pending_revocation = dict(nxt.pending_revocation)  # type: ignore[attr-defined]
    given = getattr(nxt, "assignment_epochs", None)
    if given is not None:  # another member: its epochs as they are
        out.assignment_epochs = dict(given)
    else:  # a reconcile result: kept partitions keep theirs, new ones get the new epoch
        out.assignment_epochs = {
            (t, p): member.assignment_epochs.get((t, p), out.member_epoch)
            for t, ps in out.assigned.items() for p in ps}
    return out


def _with_request(member: ConsumerMember, args: HeartbeatArgs) -> ConsumerMember:
    """``member`` updated with what the heartbeat sets (null fields keep their value)."""
    out = replace_assignment(member, member)
    out.client_id, out.client_host = args.client_id, args.client_host
    if args.instance_id is not None:
        out.instance_id = args.instance_id
    if args.rack_id is not None:
        out.rack_id = args.rack_id
    if args.rebalance_timeout_ms != -1:
        out.rebalance_timeout_ms = args.rebalance_timeout_ms
    if args.subscribed_topic_names is not None:
        out.subscribed_topic_names = tuple(sorted(set(args.subscribed_topic_names)))
    if args.subscribed_topic_regex is not None:
        out.subscribed_topic_regex = args.subscribed_topic_regex or None
    if args.server_assignor is not None:
        out.server_assignor = args.server_assignor
    return out


def _subscription(member: ConsumerMember) -> tuple[object, ...]:
    return (member.subscribed_topic_names, member.subscribed_topic_regex,
            member.server_assignor, member.rack_id)


def _replaced_by(other: ConsumerMember, joining: ConsumerMember) -> bool:
    return (other.member_id != joining.member_id and joining.instance_id is not None
            and other.instance_id == joining.instance_id)


def _resolve(member: ConsumerMember, topics: Mapping[str, TopicInfo]) -> frozenset[str]:
    """The member's topics that exist: its names, and (internal topics aside) the names its
    regular expression matches whole."""
    names = {name for name in member.subscribed_topic_names if name in topics}
    if member.subscribed_topic_regex:
        pattern = compile_pattern(member.subscribed_topic_regex)
        names.update(name for name, info in topics.items()
                     if not info.internal and pattern.fullmatch(name))
    return frozenset(names)


def chosen_assignor(members: object, default: str = ASSIGNORS[0]) -> str:
    """The assignor most members ask for, else ``default`` (the first configured)."""
    wanted = Counter(m.server_assignor for m in members  # type: ignore[attr-defined]
                     if m.server_assignor)
    return wanted.most_common(1)[0][0] if wanted else default


def _target_covers(group: ConsumerGroup,
                   snapshot: tuple[tuple[str, uuid.UUID, int], ...]) -> bool:
    """Whether the group's stored target assignment (at the group epoch) assigns exactly the
    partitions of ``snapshot``'s topics: after a load, the topics did not change since."""
    if not group.members or group.assignment_epoch != group.group_epoch:
        return False
    expected = {(topic_id, p) for _, topic_id, count in snapshot for p in range(count)}
    covered = [(t, p) for target in group.target.values() for t, ps in target.items()
               for p in ps]
    return len(covered) == len(expected) and set(covered) == expected


def _normal(assignment: Assignment) -> dict[uuid.UUID, frozenset[int]]:
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


def _contains(assigned: Assignment, owned: Assignment) -> bool:
    return all(set(ps) <= set(assigned.get(t, ())) for t, ps in owned.items())


__all__ = ["ConsumerGroups", "ConsumerSettings", "GroupState", "HeartbeatArgs",
           "HeartbeatResult", "chosen_assignor"]
