"""Replica placement matches Kafka's assignReplicasToBrokers on its documented examples."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from strom.common.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
)
from strom.controller.placement import assign_added_partitions, assign_replicas, rack_alternated
from strom.metadata.image import BrokerInfo


def brokers(*ids: int, racks: dict[int, str] | None = None) -> list[BrokerInfo]:
    return [BrokerInfo(i, f"h{i}", 9092, (racks or {}).get(i)) for i in ids]


def test_rack_unaware_round_robin_with_shifting_followers() -> None:
    # Kafka's AdminUtils example: 5 brokers, 10 partitions, 3 replicas, start index 0.
    got = assign_replicas(brokers(4, 2, 0, 3, 1), 10, 3, start_index=0)
    assert got == {
        0: (0, 1, 2), 1: (1, 2, 3), 2: (2, 3, 4), 3: (3, 4, 0), 4: (4, 0, 1),
        5: (0, 2, 3), 6: (1, 3, 4), 7: (2, 4, 0), 8: (3, 0, 1), 9: (4, 1, 2),
    }


def test_rack_alternated_broker_list() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated(racks) == [0, 3, 1, 5, 4, 2]
    even = {i: f"rack{i // 3 + 1}" for i in range(9)}
    assert rack_alternated(even) == [0, 3, 6, 1, 4, 7, 2, 5, 8]
    assert rack_alternated({0: "a", 1: "a", 2: "b"}) == [0, 2, 1]


def test_rack_aware_example() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    got = assign_replicas(brokers(*racks, racks=racks), 7, 3, start_index=0)
    assert got == {
        0: (0, 3, 1), 1: (3, 1, 5), 2: (1, 5, 4), 3: (5, 4, 2), 4: (4, 2, 0), 5: (2, 0, 3),
        6: (0, 4, 2),  # the second round shifts the followers
    }


@pytest.mark.parametrize("seed", range(20))
def test_random_start_spreads_leaders_and_replicas(seed: int) -> None:
    rng = random.Random(seed)
    got = assign_replicas(brokers(0, 1, 2, 3), 8, 3, rng=rng)
    assert sorted(got) == list(range(8))
    assert all(len(set(r)) == 3 for r in got.values())
    assert Counter(r[0] for r in got.values()) == {b: 2 for b in range(4)}
    assert Counter(b for r in got.values() for b in r) == {b: 6 for b in range(4)}


@pytest.mark.parametrize("seed", range(20))
def test_rack_aware_puts_replicas_in_different_racks(seed: int) -> None:
    racks = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    got = assign_replicas(brokers(*racks, racks=racks), 12, 3, rng=random.Random(seed))
    for replicas in got.values():
        assert len({racks[b] for b in replicas}) == 3 and len(set(replicas)) == 3
    two = assign_replicas(brokers(*racks, racks=racks), 12, 4, rng=random.Random(seed))
    for replicas in two.values():  # more replicas than racks: every rack still gets one
        assert {racks[b] for b in replicas} == {"a", "b", "c"} and len(set(replicas)) == 4


def test_single_broker() -> None:
    assert assign_replicas(brokers(7), 3, 1) == {0: (7,), 1: (7,), 2: (7,)}


def test_errors() -> None:
    with pytest.raises(InvalidPartitionsError, match="larger than 0"):
        assign_replicas(brokers(0), 0, 1)
    with pytest.raises(InvalidReplicationFactorError, match="larger than 0"):
        assign_replicas(brokers(0), 1, 0)
    with pytest.raises(InvalidReplicationFactorError,
                       match="Replication factor: 2 larger than available brokers: 1"):
        assign_replicas(brokers(0), 1, 2)
    with pytest.raises(InvalidReplicaAssignmentError, match="rack"):
        assign_replicas(brokers(0, 1, racks={0: "a"}), 1, 1)


def test_added_partitions_continue_from_partition_0s_leader() -> None:
    # Partition 0 led by broker 1: start index 1 (also the follower shift), from partition 2.
    got = assign_added_partitions(brokers(0, 1, 2), [(1, 2), (2, 0)], 4)
    assert got == {2: (0, 2), 3: (1, 2)}
    assert got == assign_replicas(brokers(0, 1, 2), 2, 2, start_index=1, first_partition=2)
    # partition 0's leader is gone: start at the next higher id (or the first broker)
    assert assign_added_partitions(brokers(0, 2), [(1, 2)], 2) == \
        assign_replicas(brokers(0, 2), 1, 2, start_index=1, first_partition=1)
    assert assign_added_partitions(brokers(0, 1), [(5,)], 2) == {1: (1,)}
    with pytest.raises(InvalidReplicationFactorError):
        assign_added_partitions(brokers(0), [(0, 1)], 2)
