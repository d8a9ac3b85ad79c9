"""Consumer-group admin against a real strom broker, with a real group (confluent-kafka).

Skipped until the broker serves the group APIs (see :mod:`tests.client.groups_e2e`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from strom.client import AdminClient, GroupState, OffsetAndMetadata, SyncAdminClient
from strom.common.errors import KafkaError, error_class
from strom.common.types import TopicPartition
from tests.client.groups_e2e import (
    GroupMember,
    bootstrap_of,
    make_topic,
    produce,
    requires_group_apis,
    skip_unless_served,
    unique,
    wait_for,
)

pytestmark = requires_group_apis
TP = TopicPartition
GroupIdNotFoundError = error_class("GROUP_ID_NOT_FOUND")
NonEmptyGroupError = error_class("NON_EMPTY_GROUP")


@pytest.fixture
def bootstrap(strom_broker: Any) -> Iterator[str]:
    address = bootstrap_of(strom_broker)
    skip_unless_served(address)
    yield address


def _gone(admin: SyncAdminClient, group_id: str) -> bool:
    try:
        return admin.describe_group(group_id).state == GroupState.DEAD
    except GroupIdNotFoundError:
        return True


def test_group_lifecycle(bootstrap: str) -> None:
    topic = make_topic(bootstrap, {0: 6, 1: 4})
    group_id = unique("g")
    member = GroupMember(bootstrap, group_id, topic, client_id="e2e-client")
    try:
        member.consume(10)
        member.commit()
        produce(bootstrap, topic, {0: 2})  # lag 2 on partition 0
        with SyncAdminClient(bootstrap) as admin:
            listed = {g.group_id: g for g in admin.list_groups()}
            assert listed[group_id].protocol_type == "consumer"
            assert listed[group_id].state == GroupState.STABLE
            stable = [g.group_id for g in admin.list_groups([GroupState.STABLE])]
            assert group_id in stable
            assert group_id not in [g.group_id for g in admin.list_groups([GroupState.EMPTY])]

            described = admin.describe_group(group_id)
            assert described.state == GroupState.STABLE and described.is_active
            assert described.protocol_type == "consumer" and described.protocol
            [m] = described.members
            assert m.client_id == "e2e-client" and m.member_id and m.client_host
            assert m.subscription is not None and m.subscription.topics == (topic,)
            assert sorted(m.partitions) == [TP(topic, 0), TP(topic, 1)]
            assert described.coordinator == admin.find_coordinator(group_id)

            committed = admin.list_consumer_group_offsets(group_id)
            assert {tp: o.offset for tp, o in committed.items()} == {TP(topic, 0): 6,
                                                                     TP(topic, 1): 4}
            only = admin.list_consumer_group_offsets(group_id, [TP(topic, 1)])
            assert list(only) == [TP(topic, 1)]

            # An active group keeps its offsets and cannot be deleted.
            with pytest.raises(KafkaError):
                admin.alter_consumer_group_offsets(group_id, {TP(topic, 0): 0})
            with pytest.raises(NonEmptyGroupError):
                admin.delete_consumer_groups([group_id])

            member.close()
            wait_for(lambda: admin.describe_group(group_id).state == GroupState.EMPTY,
                     "the group to become empty")
            assert not admin.describe_group(group_id).members

            admin.alter_consumer_group_offsets(
                group_id, {TP(topic, 0): 1, TP(topic, 1): OffsetAndMetadata(2, "by-admin")})
            after = admin.list_consumer_group_offsets(group_id)
            assert after[TP(topic, 0)].offset == 1
            assert after[TP(topic, 1)][:2] == (2, "by-admin")

            # A new member resumes from the offsets the admin set.
            again = GroupMember(bootstrap, group_id, topic, reset="latest")
            try:
                got = again.consume(7 + 2)  # p0: 1..7, p1: 2..3
                assert sorted(got) == [(0, o) for o in range(1, 8)] + [(1, 2), (1, 3)]
            finally:
                again.close()
            wait_for(lambda: admin.describe_group(group_id).state == GroupState.EMPTY,
                     "the group to become empty again")

            admin.delete_consumer_group_offsets(group_id, [TP(topic, 1)])
            assert list(admin.list_consumer_group_offsets(group_id)) == [TP(topic, 0)]

            admin.delete_consumer_groups([group_id])
            assert _gone(admin, group_id)
            assert group_id not in [g.group_id for g in admin.list_groups()]
            with pytest.raises(GroupIdNotFoundError):
                admin.delete_consumer_groups([group_id])
    finally:
        member.close()


def test_async_admin_batches_coordinators(bootstrap: str) -> None:
    topic = make_topic(bootstrap, {0: 3})
    groups = [unique("a"), unique("b")]

    async def main() -> None:
        async with AdminClient(bootstrap) as admin:
            found = await admin.find_coordinators(groups)
            assert sorted(found) == sorted(groups)
            for group_id in groups:  # an admin commit creates an empty group
                await admin.alter_consumer_group_offsets(group_id, {TP(topic, 0): 3})
            described = await admin.describe_groups(groups)
            assert [d.state for d in described.values()] == [GroupState.EMPTY] * 2
            offsets = await admin.list_consumer_group_offsets(groups[0])
            assert offsets[TP(topic, 0)].offset == 3
            await admin.delete_consumer_groups(groups)
            listed = {g.group_id for g in await admin.list_groups()}
            assert not listed & set(groups)

    asyncio.run(main())
