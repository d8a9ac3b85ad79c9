"""The assignors as Kafka's clients compute them under the same protocol names."""

from __future__ import annotations

import pytest

from strom.client.consumer.assignors import (
    AssignorError,
    CooperativeStickyAssignor,
    Member,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    assignors_named,
    decode_sticky_user_data,
    encode_sticky_user_data,
)
from strom.client.consumer_protocol import ConsumerSubscription
from strom.common.types import TopicPartition as TP


def member(mid: str, topics: tuple[str, ...], owned: tuple[TP, ...] = (), generation: int = -1,
           instance: str | None = None, user_data: bytes | None = None) -> Member:
    return Member(mid, ConsumerSubscription(topics, user_data, owned, generation), instance)


def test_range_gives_consecutive_partitions_the_first_members_one_more() -> None:
    members = [member("b", ("t",)), member("a", ("t", "u")), member("c", ("t",))]
    plan = RangeAssignor().assign({"t": 7, "u": 2}, members)
    assert plan == {"a": [TP("t", 0), TP("t", 1), TP("t", 2), TP("u", 0), TP("u", 1)],
                    "b": [TP("t", 3), TP("t", 4)], "c": [TP("t", 5), TP("t", 6)]}


def test_range_orders_static_members_first_as_java() -> None:
    members = [member("a", ("t",)), member("z", ("t",), instance="i1")]
    assert RangeAssignor().assign({"t": 2}, members) == {"z": [TP("t", 0)], "a": [TP("t", 1)]}


def test_roundrobin_deals_sorted_partitions_skipping_unsubscribed_members() -> None:
    members = [member("a", ("t",)), member("b", ("t", "u"))]
    plan = RoundRobinAssignor().assign({"t": 3, "u": 2}, members)
    assert plan == {"a": [TP("t", 0), TP("t", 2)],
                    "b": [TP("t", 1), TP("u", 0), TP("u", 1)]}


def test_sticky_keeps_owned_partitions_and_balances() -> None:
    owned_a = tuple(TP("t", p) for p in (0, 1, 2))
    owned_b = tuple(TP("t", p) for p in (3, 4, 5))
    members = [member("a", ("t",), owned_a, 1), member("b", ("t",), owned_b, 1),
               member("c", ("t",))]
    plan = StickyAssignor().assign({"t": 6}, members)
    assert sorted(len(v) for v in plan.values()) == [2, 2, 2]
    assert set(plan["a"]) <= set(owned_a) and set(plan["b"]) <= set(owned_b)
    assert sorted(tp for tps in plan.values() for tp in tps) == [TP("t", p) for p in range(6)]


def test_sticky_reads_java_user_data_and_newest_generation_wins() -> None:
    data = encode_sticky_user_data([TP("t", 0), TP("t", 1)], 5)
    assert decode_sticky_user_data(data) == ([TP("t", 0), TP("t", 1)], 5)
    stale = encode_sticky_user_data([TP("t", 0)], 3)
    members = [member("a", ("t",), user_data=data), member("b", ("t",), user_data=stale)]
    plan = StickyAssignor().assign({"t": 2}, members)
    # "a" claims both with the newer generation; balance then moves one away.
    assert len(plan["a"]) == 1 and len(plan["b"]) == 1 and plan["a"][0] in (TP("t", 0),
                                                                            TP("t", 1))


def test_cooperative_sticky_withholds_partitions_that_change_owner() -> None:
    owned_a = tuple(TP("t", p) for p in range(6))
    members = [member("a", ("t",), owned_a, 3), member("b", ("t",))]
    first = CooperativeStickyAssignor().assign({"t": 6}, members)
    assert len(first["a"]) == 3 and first["b"] == []  # b gets them in the follow-up round
    kept = tuple(first["a"])
    members = [member("a", ("t",), kept, 4), member("b", ("t",), (), 4)]
    second = CooperativeStickyAssignor().assign({"t": 6}, members)
    assert second["a"] == list(kept)
    assert sorted(second["b"]) == sorted(set(owned_a) - set(kept))


def test_assignors_by_protocol_or_java_class_name() -> None:
    names = [a.name for a in assignors_named(
        "range, org.apache.kafka.clients.consumer.CooperativeStickyAssignor")]
    assert names == ["range", "cooperative-sticky"]
    with pytest.raises(AssignorError, match="unknown partition assignor"):
        assignors_named(["nope"])
