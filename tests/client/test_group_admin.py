"""AdminClient consumer-group operations against the fake broker (old and new API versions)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from strom.client import wire
from strom.client.admin import AdminClient
from strom.client.admin_types import GroupState, OffsetAndMetadata
from strom.client.consumer_protocol import (
    ConsumerAssignment,
    ConsumerSubscription,
    encode_assignment,
    encode_subscription,
)
from strom.client.sync import LoopThread, SyncAdminClient
from strom.common.errors import KafkaError, UnsupportedVersionError, error_class
from strom.common.types import TopicPartition
from strom.protocol.versions import SUPPORTED, ApiKey
from tests.client.fake_broker import (
    GROUP_API_VERSIONS,
    FakeBroker,
    FakeGroup,
    without_group_apis,
)

TP = TopicPartition
GroupIdNotFoundError = error_class("GROUP_ID_NOT_FOUND")
NonEmptyGroupError = error_class("NON_EMPTY_GROUP")
CoordinatorNotAvailableError = error_class("COORDINATOR_NOT_AVAILABLE")
GroupSubscribedToTopicError = error_class("GROUP_SUBSCRIBED_TO_TOPIC")
UnknownMemberIdError = error_class("UNKNOWN_MEMBER_ID")

NEW = {**SUPPORTED, **GROUP_API_VERSIONS}
# A 2.x-era broker: FindCoordinator without batching, OffsetFetch without groups[],
# ListGroups without states, DescribeGroups without error messages.
OLD = {**SUPPORTED, **GROUP_API_VERSIONS, ApiKey.FIND_COORDINATOR: (0, 3),
       ApiKey.OFFSET_FETCH: (1, 7), ApiKey.OFFSET_COMMIT: (2, 5), ApiKey.LIST_GROUPS: (0, 3),
       ApiKey.DESCRIBE_GROUPS: (0, 4), wire.DELETE_GROUPS: (0, 1)}


def with_broker(versions: dict[int, tuple[int, int]],
                test: Callable[[FakeBroker, AdminClient], Awaitable[None]],
                *, timeout_s: float = 5.0) -> None:
    async def main() -> None:
        broker = await FakeBroker(versions).start()
        try:
            async with AdminClient(broker.bootstrap, request_timeout_s=timeout_s) as admin:
                await test(broker, admin)
        finally:
            await broker.stop()

    asyncio.run(main())


def active_group(broker: FakeBroker) -> FakeGroup:
    """'g' with two members of a consumer group on topic 'orders' (3 partitions)."""
    broker.create("orders", 3)
    sub = encode_subscription(ConsumerSubscription(("orders",)))
    group = FakeGroup(state=GroupState.STABLE, protocol="range", subscribed={"orders"})
    group.members = [
        {"member_id": "m-1", "client_id": "c1", "client_host": "/10.0.0.1",
         "member_metadata": sub,
         "member_assignment": encode_assignment(ConsumerAssignment(
             (TP("orders", 0), TP("orders", 1))))},
        {"member_id": "m-2", "client_id": "c2", "client_host": "/10.0.0.2",
         "member_metadata": sub,
         "member_assignment": encode_assignment(ConsumerAssignment((TP("orders", 2),)))},
    ]
    group.offsets = {("orders", 0): (5, ""), ("orders", 1): (7, "meta")}
    broker.groups["g"] = group
    return group


def keys_sent(broker: FakeBroker, key: int) -> list[tuple[int, Any]]:
    return [(v, r) for k, v, r in broker.requests if k == key]


@pytest.mark.parametrize("versions", [NEW, OLD], ids=["new", "old"])
def test_describe_list_and_offsets(versions: dict[int, tuple[int, int]]) -> None:
    async def test(broker: FakeBroker, admin: AdminClient) -> None:
        active_group(broker)
        broker.groups["idle"] = FakeGroup()
        node = await admin.find_coordinator("g")
        assert (node.node_id, node.port) == (0, broker.port)

        described = await admin.describe_group("g")
        assert described.state == "Stable" and described.protocol == "range"
        assert described.protocol_type == "consumer" and described.is_active
        m1, m2 = described.members
        assert (m1.member_id, m1.client_id, m1.client_host) == ("m-1", "c1", "/10.0.0.1")
        assert m1.subscription is not None and m1.subscription.topics == ("orders",)
        assert m1.partitions == (TP("orders", 0), TP("orders", 1))
        assert m2.partitions == (TP("orders", 2),)
        assert described.coordinator == node

        listed = await admin.list_groups()
        assert [g.group_id for g in listed] == ["g", "idle"]
        new = versions is NEW
        assert listed[0].state == ("Stable" if new else None)
        if new:
            empty = await admin.list_groups(states=[GroupState.EMPTY])
            assert [g.group_id for g in empty] == ["idle"]
        else:
            with pytest.raises(UnsupportedVersionError, match="ListGroups v4"):
                await admin.list_groups(states=[GroupState.EMPTY])

        offsets = await admin.list_consumer_group_offsets("g")
        assert offsets == {TP("orders", 0): OffsetAndMetadata(5, ""),
                           TP("orders", 1): OffsetAndMetadata(7, "meta")}
        some = await admin.list_consumer_group_offsets("g", [TP("orders", 1), TP("orders", 2)])
        assert some == {TP("orders", 1): OffsetAndMetadata(7, "meta")}

        fc = keys_sent(broker, ApiKey.FIND_COORDINATOR)
        assert len(fc) == 1  # cached afterwards
        fetches = keys_sent(broker, ApiKey.OFFSET_FETCH)
        assert fetches[0][0] == (9 if new else 7)

    with_broker(versions, test)


@pytest.mark.parametrize("versions", [NEW, OLD], ids=["new", "old"])
def test_find_coordinators_batches_on_v4(versions: dict[int, tuple[int, int]]) -> None:
    async def test(broker: FakeBroker, admin: AdminClient) -> None:
        found = await admin.find_coordinators(["a", "b", "c"])
        assert sorted(found) == ["a", "b", "c"]
        sent = keys_sent(broker, ApiKey.FIND_COORDINATOR)
        if versions is NEW:
            assert len(sent) == 1 and list(sent[0][1].coordinator_keys) == ["a", "b", "c"]
        else:
            assert sorted(r.key for _v, r in sent) == ["a", "b", "c"]

    with_broker(versions, test)


def test_alter_offsets_as_admin_and_refusal_on_active_group() -> None:
    async def test(broker: FakeBroker, admin: AdminClient) -> None:
        active_group(broker)
        with pytest.raises(UnknownMemberIdError, match="has active members"):
            await admin.alter_consumer_group_offsets("g", {TP("orders", 0): 1})
        broker.groups["g"].members.clear()
        broker.groups["g"].state = GroupState.EMPTY
        await admin.alter_consumer_group_offsets(
            "g", {TP("orders", 0): 1, TP("orders", 2): OffsetAndMetadata(9, "m")})
        assert broker.groups["g"].offsets[("orders", 0)] == (1, "")
        assert broker.groups["g"].offsets[("orders", 2)] == (9, "m")
        [(version, commit)] = keys_sent(broker, ApiKey.OFFSET_COMMIT)[-1:]
        assert commit.generation_id_or_member_epoch == -1 and commit.member_id == ""
        assert version == 9
        # A new group is created by an admin commit (as Kafka does).
        await admin.alter_consumer_group_offsets("fresh", {TP("orders", 1): 3})
        assert broker.groups["fresh"].offsets == {("orders", 1): (3, "")}
        # Unknown topics are partition errors.
        with pytest.raises(KafkaError, match="UNKNOWN_TOPIC_OR_PARTITION"):
            await admin.alter_consumer_group_offsets("g", {TP("nope", 0): 1})

    with_broker(NEW, test, timeout_s=0.5)


@pytest.mark.parametrize("versions", [NEW, OLD], ids=["new", "old"])
def test_delete_groups_and_offsets(versions: dict[int, tuple[int, int]]) -> None:
    async def test(broker: FakeBroker, admin: AdminClient) -> None:
        active_group(broker)
        broker.groups["idle"] = FakeGroup(offsets={("orders", 0): (1, "")})
        with pytest.raises(NonEmptyGroupError, match="'g' has active members"):
            await admin.delete_consumer_groups(["g"])
        with pytest.raises(GroupIdNotFoundError, match="'missing' does not exist"):
            await admin.delete_consumer_groups(["missing", "idle"])
        assert "idle" not in broker.groups  # every group is tried
        with pytest.raises(GroupSubscribedToTopicError):
            await admin.delete_consumer_group_offsets("g", [TP("orders", 0)])
        broker.groups["g"].subscribed.clear()
        await admin.delete_consumer_group_offsets("g", [TP("orders", 0)])
        assert ("orders", 0) not in broker.groups["g"].offsets
        with pytest.raises(GroupIdNotFoundError):
            await admin.delete_consumer_group_offsets("missing", [TP("orders", 0)])

    with_broker(versions, test)


def test_describe_missing_group() -> None:
    async def test(broker: FakeBroker, admin: AdminClient) -> None:
        with pytest.raises(GroupIdNotFoundError, match="'nope' does not exist"):
            await admin.describe_group("nope")

    with_broker(NEW, test)

    async def old(broker: FakeBroker, admin: AdminClient) -> None:
        described = await admin.describe_group("nope")
        assert described.state == GroupState.DEAD and not described.is_active

    with_broker(OLD, old)


def test_coordinator_errors_are_retried() -> None:
    async def test(broker: FakeBroker, admin: AdminClient) -> None:
        active_group(broker)
        # FindCoordinator: not available twice (offsets topic loading), then found.
        broker.coordinator_errors = [15, 15]
        assert (await admin.find_coordinator("g")).node_id == 0
        assert len(keys_sent(broker, ApiKey.FIND_COORDINATOR)) == 3

        # DescribeGroups: NOT_COORDINATOR once -> coordinator looked up again.
        answers = iter([16])

        async def describe_hook(key: int, version: int, request: Any) -> Any:
            code = next(answers, 0)
            if not code:
                return None
            return {"groups": [{"error_code": code, "group_id": g, "group_state": "",
                                "protocol_type": "", "protocol_data": "", "members": []}
                               for g in request.groups]}

        broker.hooks[ApiKey.DESCRIBE_GROUPS] = describe_hook
        assert (await admin.describe_group("g")).state == "Stable"
        assert len(keys_sent(broker, ApiKey.FIND_COORDINATOR)) == 4

        # OffsetFetch: COORDINATOR_LOAD_IN_PROGRESS once -> same coordinator, retried.
        loads = iter([14])

        async def fetch_hook(key: int, version: int, request: Any) -> Any:
            code = next(loads, 0)
            if not code:
                return None
            return {"groups": [{"group_id": "g", "error_code": code, "topics": []}]}

        broker.hooks[ApiKey.OFFSET_FETCH] = fetch_hook
        assert len(await admin.list_consumer_group_offsets("g")) == 2
        assert len(keys_sent(broker, ApiKey.FIND_COORDINATOR)) == 4

        # A coordinator that never becomes available: the error after the timeout.
        broker.coordinator_errors = [15] * 100
        with pytest.raises(CoordinatorNotAvailableError, match="group 'other'"):
            await admin.find_coordinator("other")

    with_broker(NEW, test, timeout_s=1.0)


def test_broker_without_group_apis() -> None:
    async def test(broker: FakeBroker, admin: AdminClient) -> None:
        with pytest.raises(UnsupportedVersionError, match="does not support consumer groups"):
            await admin.describe_group("g")

    with_broker(without_group_apis(SUPPORTED), test)


def test_sync_facade() -> None:
    loop = LoopThread("fake-broker")
    broker = loop.run(FakeBroker(NEW).start())
    try:
        active_group(broker)
        with SyncAdminClient(broker.bootstrap) as admin:
            assert [g.group_id for g in admin.list_groups()] == ["g"]
            assert admin.describe_groups(["g"])["g"].state == "Stable"
            assert admin.find_coordinators(["g"])["g"].node_id == 0
            assert admin.find_coordinator("g").node_id == 0
            assert admin.list_consumer_group_offsets("g")[TP("orders", 0)].offset == 5
            broker.groups["g"].members.clear()
            broker.groups["g"].subscribed.clear()
            admin.alter_consumer_group_offsets("g", {TP("orders", 0): 2})
            assert admin.list_consumer_group_offsets("g")[TP("orders", 0)].offset == 2
            admin.delete_consumer_group_offsets("g", [TP("orders", 0)])
            admin.delete_consumer_groups(["g"])
            assert admin.list_groups() == []
    finally:
        loop.run(broker.stop())
        loop.stop()
