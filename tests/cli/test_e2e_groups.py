"""``strom groups`` against a real strom broker, with a real group (confluent-kafka).

Skipped until the broker serves the group APIs (see :mod:`tests.client.groups_e2e`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from strom.client import GroupState, SyncAdminClient
from strom.common.types import TopicPartition
from tests.cli.conftest import Result
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

pytestmark = [requires_group_apis, pytest.mark.usefixtures("groups_registered")]
TP = TopicPartition


@pytest.fixture
def bootstrap(strom_broker: Any) -> Iterator[str]:
    address = bootstrap_of(strom_broker)
    skip_unless_served(address)
    yield address


def rows(out: str, group_id: str) -> dict[tuple[str, int], list[str]]:
    """Offset-table rows of ``describe`` / ``reset-offsets`` by (topic, partition)."""
    table: dict[tuple[str, int], list[str]] = {}
    for line in out.splitlines():
        cells = line.split()
        if len(cells) >= 4 and cells[0] == group_id:
            table[(cells[1], int(cells[2]))] = cells[3:]
    return table


def committed(bootstrap: str, group_id: str) -> dict[TopicPartition, int]:
    with SyncAdminClient(bootstrap) as admin:
        return {tp: o.offset for tp, o in admin.list_consumer_group_offsets(group_id).items()}


def test_groups_commands(cli: Callable[..., Result], bootstrap: str) -> None:
    b = ["--bootstrap-server", bootstrap]
    topic = make_topic(bootstrap, {0: 6, 1: 4})
    group_id = unique("cg")
    member = GroupMember(bootstrap, group_id, topic, client_id="cli-e2e")
    try:
        member.consume(10)
        member.commit()
        produce(bootstrap, topic, {0: 3})  # lag 3 on partition 0

        assert group_id in cli("groups", "list", *b).out.split()
        stable = cli("groups", "list", "--state", "stable", *b)
        assert [group_id, "Stable"] in [line.split() for line in stable.out.splitlines()]

        described = cli("groups", "describe", group_id, *b)
        assert described.code == 0, described.err
        head = described.out.splitlines()[0]
        assert f"Group: {group_id}  State: Stable  Protocol: consumer (" in head
        assert head.endswith("Members: 1")
        table = rows(described.out, group_id)
        assert table[(topic, 0)][:3] == ["6", "9", "3"]
        assert table[(topic, 1)][:3] == ["4", "4", "0"]
        assert table[(topic, 0)][-1] == "cli-e2e" and table[(topic, 0)][3] != "-"
        assert f"{topic}(0,1)" in described.out

        refused = cli("groups", "reset-offsets", group_id, "--topic", topic, "--to-earliest",
                      "--execute", *b)
        assert refused.code == 1 and refused.err.count("\n") == 1
        assert "NON_EMPTY_GROUP" in refused.err and "active member" in refused.err
        busy = cli("groups", "delete", group_id, *b)
        assert busy.code == 1 and "NON_EMPTY_GROUP" in busy.err
        assert committed(bootstrap, group_id) == {TP(topic, 0): 6, TP(topic, 1): 4}

        member.close()
        with SyncAdminClient(bootstrap) as admin:
            wait_for(lambda: admin.describe_group(group_id).state == GroupState.EMPTY,
                     "the group to become empty")

        idle = cli("groups", "describe", group_id, *b)
        assert idle.code == 0 and "has no active members" in idle.err
        assert rows(idle.out, group_id)[(topic, 0)] == ["6", "9", "3", "-", "-", "-"]

        dry = cli("groups", "reset-offsets", group_id, "--topic", topic, "--to-earliest", *b)
        assert dry.code == 0, dry.err
        assert "Dry run" in dry.err
        assert rows(dry.out, group_id) == {(topic, 0): ["6", "0"], (topic, 1): ["4", "0"]}
        assert committed(bootstrap, group_id) == {TP(topic, 0): 6, TP(topic, 1): 4}

        done = cli("groups", "reset-offsets", group_id, "--topic", topic, "--to-earliest",
                   "--execute", *b)
        assert done.code == 0, done.err
        assert committed(bootstrap, group_id) == {TP(topic, 0): 0, TP(topic, 1): 0}
        lag = rows(cli("groups", "describe", group_id, *b).out, group_id)
        assert lag[(topic, 0)][:3] == ["0", "9", "9"] and lag[(topic, 1)][:3] == ["0", "4", "4"]

        shift = cli("groups", "reset-offsets", group_id, "--topic", f"{topic}:0", "--shift-by",
                    "5", "--execute", *b)
        assert shift.code == 0, shift.err
        latest = cli("groups", "reset-offsets", group_id, "--all-topics", "--to-datetime",
                     "2999-01-01T00:00:00Z", *b)
        assert rows(latest.out, group_id) == {(topic, 0): ["5", "9"], (topic, 1): ["0", "4"]}
        by_offset = cli("groups", "reset-offsets", group_id, "--topic", f"{topic}:1",
                        "--to-offset", "100", "--execute", *b)
        assert rows(by_offset.out, group_id) == {(topic, 1): ["0", "4"]}  # clamped
        assert committed(bootstrap, group_id) == {TP(topic, 0): 5, TP(topic, 1): 4}

        unknown = cli("groups", "reset-offsets", group_id, "--topic", "no-such-topic",
                      "--to-earliest", *b)
        assert unknown.code == 1 and "topic 'no-such-topic' does not exist" in unknown.err

        # A consumer joining the group now resumes from the reset offsets.
        again = GroupMember(bootstrap, group_id, topic, reset="latest")
        try:
            assert sorted(again.consume(4)) == [(0, 5), (0, 6), (0, 7), (0, 8)]
        finally:
            again.close()
        with SyncAdminClient(bootstrap) as admin:
            wait_for(lambda: admin.describe_group(group_id).state == GroupState.EMPTY,
                     "the group to become empty again")

        deleted = cli("groups", "delete", group_id, *b)
        assert deleted.code == 0 and deleted.out == f"Deleted consumer group {group_id}.\n"
        assert group_id not in cli("groups", "list", *b).out.split()
        gone = cli("groups", "describe", group_id, *b)
        assert gone.code == 1 and "GROUP_ID_NOT_FOUND" in gone.err
        missing = cli("groups", "delete", group_id, *b)
        assert missing.code == 1 and "GROUP_ID_NOT_FOUND" in missing.err
    finally:
        member.close()
