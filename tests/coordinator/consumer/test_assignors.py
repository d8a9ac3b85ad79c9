"""The server-side assignors: every subscribed partition assigned once, balanced, sticky."""

from __future__ import annotations

import uuid

import pytest

from strom.coordinator.group.consumer.assignors import assign, range_assign, uniform_assign

A, B = uuid.UUID(int=1), uuid.UUID(int=2)


def flat(targets: dict[str, dict[uuid.UUID, frozenset[int]]]) -> list[tuple[uuid.UUID, int]]:
    return sorted((t, p) for parts in targets.values() for t, ps in parts.items() for p in ps)


@pytest.mark.parametrize("members", [1, 2, 3, 5, 8])
def test_uniform_assigns_every_partition_once_and_balances(members: int) -> None:
    subs = {f"m{i}": frozenset({A, B}) for i in range(members)}
    out = uniform_assign(subs, {A: 7, B: 4}, {})
    assert flat(out) == sorted([(A, p) for p in range(7)] + [(B, p) for p in range(4)])
    counts = [sum(len(ps) for ps in parts.values()) for parts in out.values()]
    assert max(counts) - min(counts) <= 1


def test_uniform_is_sticky_when_a_member_joins() -> None:
    subs = {"m0": frozenset({A}), "m1": frozenset({A})}
    before = uniform_assign(subs, {A: 6}, {})
    after = uniform_assign({**subs, "m2": frozenset({A})}, {A: 6}, before)
    for member in ("m0", "m1"):  # the old members only give partitions away
        assert after[member][A] <= before[member][A]
    assert len(after["m2"][A]) == 2


def test_uniform_only_gives_a_member_its_subscribed_topics() -> None:
    out = uniform_assign({"m0": frozenset({A}), "m1": frozenset({B})}, {A: 3, B: 3}, {})
    assert set(out["m0"]) == {A} and set(out["m1"]) == {B}


def test_range_gives_contiguous_ranges_per_topic() -> None:
    out = range_assign({"b": frozenset({A}), "a": frozenset({A})}, {A: 5})
    assert out["a"][A] == frozenset({0, 1, 2}) and out["b"][A] == frozenset({3, 4})
    assert assign("range", {"a": frozenset({A})}, {A: 2}, {}) == {"a": {A: frozenset({0, 1})}}


def test_configured_assignors_take_kafkas_class_names() -> None:
    from strom.coordinator.group.consumer.settings import assignor_names

    assert assignor_names(["org.apache.kafka.coordinator.group.assignor.RangeAssignor",
                           "uniform"]) == ("range", "uniform")
    assert assignor_names([]) == ("uniform", "range")
