"""``strom groups``: reset planning (pure) and the commands against the fake broker."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from strom.cli.common import UsageError
from strom.cli.groups import format_assignment, format_table, parse_states
from strom.cli.groups_reset import (
    PartitionBounds,
    ResetKind,
    ResetSpec,
    parse_topic_spec,
    plan_reset,
)
from strom.client.consumer_protocol import (
    ConsumerAssignment,
    ConsumerSubscription,
    encode_assignment,
    encode_subscription,
)
from strom.common.types import TopicPartition
from tests.cli.conftest import Result
from tests.client.fake_broker import FakeBroker, FakeGroup, without_group_apis

TP = TopicPartition
pytestmark = pytest.mark.usefixtures("groups_registered")


# -- pure helpers ---------------------------------------------------------------------------
def test_parse_topic_spec() -> None:
    assert parse_topic_spec("orders") == ("orders", None)
    assert parse_topic_spec("orders:2,0, 2") == ("orders", [0, 2])
    for bad in ("", ":1", "orders:", "orders:a", "orders:-1"):
        with pytest.raises(UsageError):
            parse_topic_spec(bad)


def test_parse_states() -> None:
    assert parse_states("stable, EMPTY") == ["Stable", "Empty"]
    assert parse_states("preparingrebalance") == ["PreparingRebalance"]
    with pytest.raises(UsageError, match="unknown group state 'busy'"):
        parse_states("busy")


def test_format_helpers() -> None:
    assert format_table(["A", "LONG"], [("xyz", None), ("1", 2)]) == "A    LONG\nxyz  -\n1    2"
    assert format_assignment([TP("b", 1), TP("a", 2), TP("a", 0)]) == "a(0,2),b(1)"


BOUNDS = {TP("t", 0): PartitionBounds(10, 100, 50), TP("t", 1): PartitionBounds(0, 5, -1)}
PARTS = [TP("t", 0), TP("t", 1)]


@pytest.mark.parametrize(("spec", "expected"), [
    (ResetSpec(ResetKind.EARLIEST), [10, 0]),
    (ResetSpec(ResetKind.LATEST), [100, 5]),
    (ResetSpec(ResetKind.OFFSET, 3), [10, 3]),          # clamped up to the log start
    (ResetSpec(ResetKind.OFFSET, 1000), [100, 5]),      # clamped down to the log end
    (ResetSpec(ResetKind.DATETIME, 1), [50, 5]),        # no record after the time: latest
    (ResetSpec(ResetKind.SHIFT, -15), [10, 0]),
    (ResetSpec(ResetKind.SHIFT, 2), [22, 5]),
])
def test_plan_reset(spec: ResetSpec, expected: list[int]) -> None:
    committed = {TP("t", 0): 20, TP("t", 1): 4}
    assert list(plan_reset(spec, PARTS, committed, BOUNDS).values()) == expected


def test_shift_needs_a_committed_offset() -> None:
    with pytest.raises(UsageError, match="no committed offset"):
        plan_reset(ResetSpec(ResetKind.SHIFT, 1), PARTS, {TP("t", 0): 20}, BOUNDS)


# -- commands against the fake broker -------------------------------------------------------
def setup_group(broker: FakeBroker, *, active: bool) -> None:
    """Topic 'orders' (2 partitions, 10 and 4 records) and group 'g' with commits 3 and —."""
    broker.create("orders", 2)
    broker.topics["orders"][0].next_offset = 10
    broker.topics["orders"][1].next_offset = 4
    group = FakeGroup(offsets={("orders", 0): (3, "")})
    if active:
        group.state, group.protocol = "Stable", "range"
        group.subscribed = {"orders"}
        group.members = [{
            "member_id": "consumer-1-abc", "client_id": "consumer-1", "client_host": "/127.0.0.1",
            "member_metadata": encode_subscription(ConsumerSubscription(("orders",))),
            "member_assignment": encode_assignment(ConsumerAssignment(
                (TP("orders", 0), TP("orders", 1))))}]
    broker.groups["g"] = group


def test_list_and_describe(cli: Callable[..., Result], group_broker: FakeBroker) -> None:
    b = ["--bootstrap-server", group_broker.bootstrap]
    setup_group(group_broker, active=True)
    group_broker.groups["idle"] = FakeGroup()
    assert cli("groups", "list", *b).out == "g\nidle\n"
    states = cli("groups", "list", "--state", *b)
    assert states.out.splitlines() == ["GROUP  STATE", "g      Stable", "idle   Empty"]
    only = cli("groups", "list", "--state", "empty", *b)
    assert only.out.splitlines() == ["GROUP  STATE", "idle   Empty"]
    bad = cli("groups", "list", "--state", "busy", *b)
    assert bad.code == 1 and "unknown group state 'busy'" in bad.err

    described = cli("groups", "describe", "g", *b)
    assert described.code == 0, described.err
    lines = described.out.splitlines()
    assert lines[0].startswith("Group: g  State: Stable  Protocol: consumer (range)  "
                               "Coordinator: 0 (127.0.0.1:")
    assert lines[0].endswith("Members: 1")
    assert lines[2].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET",
                                "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    assert lines[3].split() == ["g", "orders", "0", "3", "10", "7", "consumer-1-abc",
                                "/127.0.0.1", "consumer-1"]
    assert lines[4].split() == ["g", "orders", "1", "-", "4", "-", "consumer-1-abc",
                                "/127.0.0.1", "consumer-1"]
    assert lines[6].split() == ["CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
    assert lines[7].split() == ["consumer-1-abc", "/127.0.0.1", "consumer-1", "2",
                                "orders(0,1)"]
    members = cli("groups", "describe", "g", "--members", *b)
    assert "LAG" not in members.out and "ASSIGNMENT" in members.out

    idle = cli("groups", "describe", "idle", *b)
    assert idle.code == 0 and "has no active members" in idle.err
    missing = cli("groups", "describe", "nope", *b)
    assert missing.code == 1
    assert missing.err == ("strom groups: error: GROUP_ID_NOT_FOUND (69): group 'nope' does not "
                           "exist (Group nope not found.)\n")


def test_describe_with_deleted_topic(cli: Callable[..., Result],
                                     group_broker: FakeBroker) -> None:
    setup_group(group_broker, active=False)
    group_broker.groups["g"].offsets[("gone", 0)] = (8, "")
    out = cli("groups", "describe", "g", "-b", group_broker.bootstrap)
    assert out.code == 0, out.err
    assert ["g", "gone", "0", "8", "-", "-", "-", "-", "-"] in \
        [line.split() for line in out.out.splitlines()]


def test_reset_offsets(cli: Callable[..., Result], group_broker: FakeBroker) -> None:
    b = ["--bootstrap-server", group_broker.bootstrap]
    setup_group(group_broker, active=True)
    refused = cli("groups", "reset-offsets", "g", "--topic", "orders", "--to-earliest", *b)
    assert refused.code == 1
    assert refused.err == ("strom groups: error: NON_EMPTY_GROUP (68): cannot reset offsets of "
                           "group 'g': it has 1 active member(s) (state Stable); stop its "
                           "consumers first\n")
    group_broker.groups["g"].members.clear()
    group_broker.groups["g"].state = "Empty"

    dry = cli("groups", "reset-offsets", "g", "--topic", "orders", "--to-latest", *b)
    assert dry.code == 0, dry.err
    assert [line.split() for line in dry.out.splitlines()] == [
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
        ["g", "orders", "0", "3", "10"], ["g", "orders", "1", "-", "4"]]
    assert "Dry run" in dry.err
    assert group_broker.groups["g"].offsets == {("orders", 0): (3, "")}

    shift = cli("groups", "reset-offsets", "g", "--topic", "orders:0", "--shift-by", "-2",
                "--execute", *b)
    assert shift.code == 0, shift.err
    assert shift.out.splitlines()[1].split() == ["g", "orders", "0", "3", "1"]
    assert "Reset the offsets of group g for 1 partition(s)" in shift.err
    assert group_broker.groups["g"].offsets[("orders", 0)][0] == 1

    no_commit = cli("groups", "reset-offsets", "g", "--topic", "orders", "--shift-by", "1", *b)
    assert no_commit.code == 1 and "orders-1: the group has no committed offset" in no_commit.err

    to = cli("groups", "reset-offsets", "g", "--all-topics", "--to-offset", "7", "--execute", *b)
    assert to.code == 0 and group_broker.groups["g"].offsets[("orders", 0)][0] == 7
    when = cli("groups", "reset-offsets", "g", "--topic", "orders", "--to-datetime",
               "2020-01-01T00:00:00Z", *b)
    assert when.code == 0, when.err  # no timestamps in the fake: latest
    assert when.out.splitlines()[1].split()[-1] == "10"

    unknown = cli("groups", "reset-offsets", "g", "--topic", "nope", "--to-earliest", *b)
    assert unknown.code == 1 and "topic 'nope' does not exist" in unknown.err
    partition = cli("groups", "reset-offsets", "g", "--topic", "orders:5", "--to-earliest", *b)
    assert partition.code == 1 and "partition 5 of topic 'orders' does not exist" in \
        partition.err
    usage = cli("groups", "reset-offsets", "g", "--topic", "orders", *b)
    assert usage.code == 2 and "one of the arguments --to-earliest" in usage.err


def test_reset_a_new_group(cli: Callable[..., Result], group_broker: FakeBroker) -> None:
    group_broker.create("t", 1)
    group_broker.topics["t"][0].next_offset = 5
    out = cli("groups", "reset-offsets", "fresh", "--topic", "t", "--to-latest", "--execute",
              "-b", group_broker.bootstrap)
    assert out.code == 0, out.err
    assert group_broker.groups["fresh"].offsets == {("t", 0): (5, "")}


def test_delete(cli: Callable[..., Result], group_broker: FakeBroker) -> None:
    b = ["--bootstrap-server", group_broker.bootstrap]
    setup_group(group_broker, active=True)
    busy = cli("groups", "delete", "g", *b)
    assert busy.code == 1
    assert busy.err == ("strom groups: error: NON_EMPTY_GROUP (68): group 'g' has active "
                        "members; stop its consumers first\n")
    subscribed = cli("groups", "delete-offsets", "g", "--topic", "orders", *b)
    assert subscribed.code == 1 and "GROUP_SUBSCRIBED_TO_TOPIC" in subscribed.err
    group_broker.groups["g"].members.clear()
    group_broker.groups["g"].subscribed.clear()
    dropped = cli("groups", "delete-offsets", "g", "--topic", "orders:0", *b)
    assert dropped.code == 0 and group_broker.groups["g"].offsets == {}
    assert cli("groups", "delete", "g", *b).out == "Deleted consumer group g.\n"
    again = cli("groups", "delete", "g", *b)
    assert again.code == 1 and "GROUP_ID_NOT_FOUND (69): group 'g' does not exist" in again.err


def test_broker_without_groups(cli: Callable[..., Result], fake_broker: FakeBroker) -> None:
    fake_broker.versions = without_group_apis(fake_broker.versions)
    out = cli("groups", "list", "-b", fake_broker.bootstrap)
    assert out.code == 1 and out.err.count("\n") == 1
    assert "does not support consumer groups (it does not offer ListGroups)" in out.err
    described = cli("groups", "describe", "g", "-b", fake_broker.bootstrap)
    assert described.code == 1
    assert "does not support consumer groups (it does not offer FindCoordinator)" in described.err
