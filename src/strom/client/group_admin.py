"""Consumer-group administration: coordinator lookup, list, describe, offsets, deletion.

Owned by an :class:`~strom.client.admin.AdminClient` and used on its event loop. Every call
about a group goes to the group's coordinator, found with FindCoordinator (one batched
request for many groups on v4+, one request per group before) and cached per group id.
NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE drop the cached coordinator and look it up
again; COORDINATOR_LOAD_IN_PROGRESS retries the same one; both until the request timeout.
ListGroups goes to every broker, since each coordinates its own share of the groups.

Offsets are altered the way Kafka's AdminClient does it: an OffsetCommit with generation -1
and an empty member id, which the coordinator accepts only while the group has no members.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from strom.client import wire
from strom.client.admin_types import (
    GroupDescription,
    GroupListing,
    MemberDescription,
    OffsetAndMetadata,
)
from strom.client.cluster import Cluster, retrying
from strom.client.conn import Connection
from strom.client.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerAssignment,
    ConsumerProtocolError,
    ConsumerSubscription,
    decode_assignment,
    decode_subscription,
)
from strom.client.coordinators import (
    GROUP_KEY_TYPE,
    MOVED_CODES,
    CoordinatorFinder,
    CoordinatorLoadInProgressError,
)
from strom.client.metadata import BrokerNode
from strom.common.errors import (
    KafkaError,
    NetworkError,
    UnsupportedVersionError,
    error_class,
    error_for,
)
from strom.common.types import TopicPartition
from strom.protocol.versions import ApiKey

T = TypeVar("T")

GroupIdNotFoundError = error_class("GROUP_ID_NOT_FOUND")
NonEmptyGroupError = error_class("NON_EMPTY_GROUP")
UnknownMemberIdError = error_class("UNKNOWN_MEMBER_ID")

# Extra words for errors users meet when administering groups.
_HINTS = {
    GroupIdNotFoundError.code: "does not exist",
    NonEmptyGroupError.code: "has active members; stop its consumers first",
    UnknownMemberIdError.code: "has active members; stop its consumers first",
    error_class("REBALANCE_IN_PROGRESS").code: "is rebalancing; stop its consumers first",
}


def group_error(code: int, group_id: str, message: str | None = None) -> KafkaError:
    """The exception for a group-level error code, worded for users."""
    hint = _HINTS.get(code)
    text = f"group {group_id!r}" + (f" {hint}" if hint else "")
    if message:
        text += f" ({message})"
    return error_for(code, text)


class GroupAdmin:
    """The group operations of one admin client (see the module doc for routing and retries).

    Lifecycle: created by the admin client with its :class:`Cluster`; holds only a cache of
    group id → coordinator node. Runs on the cluster's event loop; not thread-safe.
    """

    def __init__(self, cluster: Cluster, request_timeout_s: float) -> None:
        self.cluster = cluster
        self.request_timeout_s = request_timeout_s
        self.finder = CoordinatorFinder(cluster, GROUP_KEY_TYPE, request_timeout_s, group_error)

    # -- coordinators ------------------------------------------------------------------------
    async def find_coordinators(
        self, group_ids: Iterable[str], *, use_cache: bool = True
    ) -> dict[str, BrokerNode]:
        """The coordinator of each group, retrying COORDINATOR_NOT_AVAILABLE (a coordinator
        still loading its partition of ``__consumer_offsets``) until the request timeout."""
        return await self.finder.find_many(group_ids, use_cache=use_cache)

    async def find_coordinator(self, group_id: str) -> BrokerNode:
        """The coordinator of one group (see :meth:`find_coordinators`)."""
        return await self.finder.find(group_id)

    async def _connect(self, node: BrokerNode) -> Connection:
        return await self.finder.connect(node)

    async def _on_coordinator(
        self, group_id: str, call: Callable[[Connection, BrokerNode], Awaitable[T]]
    ) -> T:
        return await self.finder.on_coordinator(group_id, call)

    # -- listing and describing --------------------------------------------------------------
    async def list_groups(
        self, states: Iterable[str] | None = None, *, types: Iterable[str] | None = None
    ) -> list[GroupListing]:
        """Every group known to any broker, sorted by id; only those in ``states`` (broker-side
        filter, ListGroups v4+) or of ``types`` (v5+) when given."""
        state_filter = sorted(set(states or ()))
        type_filter = sorted(set(types or ()))
        meta = self.cluster.metadata if self.cluster.metadata.brokers else \
            await self.cluster.refresh(None)
        nodes = sorted(meta.brokers)

        async def on_broker(node: int) -> list[GroupListing]:
            async def attempt() -> list[GroupListing]:
                conn = await self.cluster.connection(node)
                _require(conn, ApiKey.LIST_GROUPS)
                minimum = 5 if type_filter else 4 if state_filter else None
                version = conn.version(ApiKey.LIST_GROUPS, minimum=minimum)
                fields: dict[str, Any] = {}
                if version >= 4:
                    fields["states_filter"] = state_filter
                if version >= 5:
                    fields["types_filter"] = type_filter
                response = await conn.request(ApiKey.LIST_GROUPS, fields, version=version)
                if response.error_code:
                    raise error_for(response.error_code, f"ListGroups on broker {node}")
                return [GroupListing(g.group_id, g.protocol_type,
                                     getattr(g, "group_state", None) if version >= 4 else None,
                                     getattr(g, "group_type", None) if version >= 5 else None)
                        for g in response.groups]

            return await retrying(attempt, timeout_s=self.request_timeout_s)

        per_broker = await asyncio.gather(*(on_broker(n) for n in nodes))
        unique = {g.group_id: g for listing in per_broker for g in listing}
        return [unique[g] for g in sorted(unique)]

    async def describe_groups(self, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
        """State, protocol and members of each group, in the order asked. A group that does
        not exist raises GroupIdNotFoundError (DescribeGroups v6+) or comes back ``Dead``."""
        wanted = list(dict.fromkeys(group_ids))
        coordinators = await self.find_coordinators(wanted)
        by_node: dict[int, list[str]] = defaultdict(list)
        for group_id in wanted:
            by_node[coordinators[group_id].node_id].append(group_id)
        out: dict[str, GroupDescription] = {}
        retry: list[str] = []

        async def batch(groups: list[str]) -> None:
            # One DescribeGroups per coordinator; groups that moved meanwhile go one by one.
            node = coordinators[groups[0]]
            try:
                answers = await self._describe(await self._connect(node), node, groups)
            except NetworkError as exc:
                answers = dict.fromkeys(groups, exc)
            for group_id, answer in answers.items():
                if isinstance(answer, GroupDescription):
                    out[group_id] = answer
                elif answer.retriable:
                    self.finder.forget(group_id)
                    retry.append(group_id)
                else:
                    raise answer

        await asyncio.gather(*(batch(gs) for gs in by_node.values()))
        for group_id in retry:
            out[group_id] = await self._on_coordinator(group_id, _describe_one(self, group_id))
        return {g: out[g] for g in wanted}

    async def _describe(
        self, conn: Connection, node: BrokerNode, group_ids: list[str]
    ) -> dict[str, GroupDescription | KafkaError]:
        version = conn.version(ApiKey.DESCRIBE_GROUPS)
        fields: dict[str, Any] = {"groups": group_ids}
        if version >= 3:
            fields["include_authorized_operations"] = False
        response = await conn.request(ApiKey.DESCRIBE_GROUPS, fields, version=version)
        out: dict[str, GroupDescription | KafkaError] = {}
        for g in response.groups:
            out[g.group_id] = (
                group_error(g.error_code, g.group_id, getattr(g, "error_message", None))
                if g.error_code else _group_description(g, node))
        for group_id in group_ids:
            out.setdefault(group_id, error_for(
                -1, f"DescribeGroups response lacks group {group_id!r}"))
        return out

    async def describe_group(self, group_id: str) -> GroupDescription:
        """One group (see :meth:`describe_groups`)."""
        return (await self.describe_groups([group_id]))[group_id]

    # -- offsets -----------------------------------------------------------------------------
    async def list_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        require_stable: bool = False,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (all partitions, or only ``partitions``); partitions
        without a committed offset are left out."""
        wanted = None if partitions is None else list(dict.fromkeys(partitions))
        topics: list[dict[str, Any]] | None = None
        if wanted is not None:
            grouped: dict[str, list[int]] = defaultdict(list)
            for tp in wanted:
                grouped[tp.topic].append(tp.partition)
            topics = [{"name": t, "partition_indexes": ps} for t, ps in grouped.items()]

        async def call(conn: Connection, _node: BrokerNode) -> dict[TopicPartition,
                                                                    OffsetAndMetadata]:
            version = conn.version(ApiKey.OFFSET_FETCH, minimum=2 if topics is None else None)
            stable = {"require_stable": require_stable} if version >= 7 else {}
            if version >= 8:
                fields: dict[str, Any] = {
                    "groups": [{"group_id": group_id, "topics": topics}], **stable}
            else:
                fields = {"group_id": group_id, "topics": topics, **stable}
            response = await conn.request(ApiKey.OFFSET_FETCH, fields, version=version)
            if version >= 8:
                group = next((g for g in response.groups if g.group_id == group_id), None)
                if group is None:
                    raise error_for(-1, f"OffsetFetch response lacks group {group_id!r}")
                code, answer_topics = group.error_code, group.topics
            else:
                code, answer_topics = getattr(response, "error_code", 0), response.topics
            if code:
                raise group_error(code, group_id)
            out: dict[TopicPartition, OffsetAndMetadata] = {}
            for t in answer_topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if p.error_code:
                        raise error_for(p.error_code, f"committed offset of {tp} in group "
                                                      f"{group_id!r}")
                    if p.committed_offset >= 0:
                        out[tp] = OffsetAndMetadata(
                            p.committed_offset, p.metadata,
                            getattr(p, "committed_leader_epoch", -1))
            return out

        return await self._on_coordinator(group_id, call)

    async def alter_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
    ) -> None:
        """Commit ``offsets`` for the group as an admin (no member); the group must be empty."""
        await self.commit_offsets(group_id, offsets)

    async def commit_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata], *,
        generation_id: int = -1, member_id: str = "", group_instance_id: str | None = None,
    ) -> None:
        """OffsetCommit of ``offsets``: as an admin with the defaults (generation -1, no
        member), or as the group member ``member_id`` of generation ``generation_id``."""
        plan = {tp: o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(o)
                for tp, o in offsets.items()}
        if not plan:
            return
        grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for tp, o in plan.items():
            grouped[tp.topic].append({"partition_index": tp.partition,
                                      "committed_offset": o.offset,
                                      "committed_leader_epoch": o.leader_epoch,
                                      "committed_metadata": o.metadata})

        async def call(conn: Connection, _node: BrokerNode) -> None:
            version = conn.version(ApiKey.OFFSET_COMMIT)
            fields: dict[str, Any] = {
                "group_id": group_id,
                "generation_id_or_member_epoch": generation_id,
                "member_id": member_id,
                "topics": [{"name": t, "partitions": [_for_version(p, version) for p in ps]}
                           for t, ps in grouped.items()],
            }
            if version >= 7:
                fields["group_instance_id"] = group_instance_id
            if version <= 4:
                fields["retention_time_ms"] = -1
            response = await conn.request(ApiKey.OFFSET_COMMIT, fields, version=version)
            _raise_partition_errors(response.topics, group_id, "commit offset of")

        await self._on_coordinator(group_id, call)

    async def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> None:
        """Delete the group's committed offsets of ``partitions`` (OffsetDelete). The group must
        not be subscribed to their topics (GROUP_SUBSCRIBED_TO_TOPIC otherwise)."""
        grouped: dict[str, list[int]] = defaultdict(list)
        for tp in dict.fromkeys(partitions):
            grouped[tp.topic].append(tp.partition)
        if not grouped:
            return

        async def call(conn: Connection, _node: BrokerNode) -> None:
            fields = {"group_id": group_id, "topics": [
                {"name": t, "partitions": [{"partition_index": p} for p in ps]}
                for t, ps in grouped.items()]}
            response = await conn.request(wire.OFFSET_DELETE, fields)
            if response.error_code:
                raise group_error(response.error_code, group_id)
            _raise_partition_errors(response.topics, group_id, "delete offset of")

        await self._on_coordinator(group_id, call)

    # -- deletion ----------------------------------------------------------------------------
    async def delete_groups(self, group_ids: Iterable[str]) -> None:
        """Delete groups (and their committed offsets); each must be empty. Raises the first
        error (GroupIdNotFoundError, NonEmptyGroupError, …) after trying every group."""
        wanted = list(dict.fromkeys(group_ids))
        failures: list[KafkaError] = []

        async def delete_one(group_id: str) -> None:
            async def call(conn: Connection, _node: BrokerNode) -> None:
                response = await conn.request(wire.DELETE_GROUPS, {"groups_names": [group_id]})
                for r in response.results:
                    if r.group_id == group_id and r.error_code:
                        raise group_error(r.error_code, group_id)
                self.finder.forget(group_id)

            try:
                await self._on_coordinator(group_id, call)
            except KafkaError as exc:
                failures.append(exc)

        await asyncio.gather(*(delete_one(g) for g in wanted))
        if failures:
            raise failures[0]


def _require(conn: Connection, api_key: int) -> None:
    """A clear error from a broker without consumer groups (rather than a version range)."""
    if api_key not in conn.broker_versions:
        raise UnsupportedVersionError(
            f"broker {conn.address} does not support consumer groups "
            f"(it does not offer {wire.api_name(api_key)})")


def _for_version(partition: dict[str, Any], version: int) -> dict[str, Any]:
    """Leave out the committed leader epoch before OffsetCommit v6, which lacks it."""
    if version >= 6:
        return partition
    return {k: v for k, v in partition.items() if k != "committed_leader_epoch"}


def _raise_partition_errors(topics: Sequence[Any], group_id: str, what: str) -> None:
    """Raise the first partition error of an OffsetCommit / OffsetDelete response. Group-wide
    errors (coordinator moved, group not empty, …) arrive per partition too; they are worded
    for the group so that retries and messages treat them alike."""
    for t in topics:
        for p in t.partitions:
            if not p.error_code:
                continue
            if p.error_code in _HINTS or p.error_code in MOVED_CODES or \
                    p.error_code == CoordinatorLoadInProgressError.code:
                raise group_error(p.error_code, group_id)
            tp = TopicPartition(t.name, p.partition_index)
            raise error_for(p.error_code, f"{what} {tp} in group {group_id!r}")


def _group_description(g: Any, node: BrokerNode) -> GroupDescription:
    consumer = g.protocol_type == CONSUMER_PROTOCOL_TYPE
    members = tuple(_member(m, consumer) for m in g.members)
    operations = _operations(getattr(g, "authorized_operations", None))
    return GroupDescription(
        group_id=g.group_id,
        state=g.group_state,
        protocol_type=g.protocol_type,
        protocol=g.protocol_data,
        members=members,
        coordinator=node,
        authorized_operations=operations,
    )


def _operations(value: Any) -> frozenset[int] | None:
    """AclOperation codes from the decoded field (a set, or Kafka's int32 bit field where
    INT32_MIN means "not requested")."""
    if isinstance(value, (set, frozenset)):
        return frozenset(int(v) for v in value)
    if isinstance(value, int) and value != -2147483648:
        return frozenset(bit for bit in range(32) if value >> bit & 1)
    return None


def _member(m: Any, consumer: bool) -> MemberDescription:
    metadata = bytes(m.member_metadata or b"")
    assignment_bytes = bytes(m.member_assignment or b"")
    subscription: ConsumerSubscription | None = None
    assignment: ConsumerAssignment | None = None
    if consumer:
        try:
            subscription = decode_subscription(metadata) if metadata else None
        except ConsumerProtocolError:
            subscription = None
        try:
            assignment = decode_assignment(assignment_bytes)
        except ConsumerProtocolError:
            assignment = None
    return MemberDescription(
        member_id=m.member_id,
        client_id=m.client_id,
        client_host=m.client_host,
        group_instance_id=getattr(m, "group_instance_id", None),
        subscription=subscription,
        assignment=assignment,
        metadata=metadata,
        assignment_bytes=assignment_bytes,
    )


def _describe_one(
    admin: GroupAdmin, group_id: str
) -> Callable[[Connection, BrokerNode], Awaitable[GroupDescription]]:
    async def call(conn: Connection, node: BrokerNode) -> GroupDescription:
        answer = (await admin._describe(conn, node, [group_id]))[group_id]
        if isinstance(answer, KafkaError):
            raise answer
        return answer

    return call
