"""Replica placement for new partitions, by Kafka's ``AdminUtils.assignReplicasToBrokers`` rules.

Goals, as in Kafka: spread replicas evenly over the brokers; spread the other replicas of the
partitions a broker leads over the other brokers; when every broker has a rack, put a
partition's replicas in different racks where possible.

Without racks, the brokers are taken in node-id order. The first replica (the preferred leader)
of partition ``p`` is broker ``(p + start) % n``; its followers follow at a distance
``1 + (shift + j) % (n - 1)`` for the j-th follower, and ``shift`` grows by one each time the
partition number wraps around the broker list, so consecutive rounds do not repeat the same
follower sets. ``start`` and ``shift`` are random unless a start index is given (then both
are that index, as Kafka does when adding partitions).

With racks, the brokers are first arranged so that racks alternate (racks sorted by name, ids
sorted within a rack: rack1 = [0, 1], rack2 = [2] -> 0, 2, 1); leaders go round-robin over that
list, and each follower is the next broker in the shifted order whose rack holds no replica
yet (until every rack holds one) and which holds no replica yet. Some brokers with a rack and
some without is an error, as in Kafka.

Pure functions; the randomness comes from the ``rng`` argument (tests pass a seeded one).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

from strom.common.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
)
from strom.metadata.image import BrokerInfo

Assignment = dict[int, tuple[int, ...]]
"""Partition number -> replica node ids, the first being the preferred leader."""


def assign_replicas(
    brokers: Iterable[BrokerInfo],
    partitions: int,
    replication_factor: int,
    *,
    start_index: int | None = None,
    first_partition: int = 0,
    rng: random.Random | None = None,
) -> Assignment:
    """Replicas for partitions ``first_partition .. first_partition + partitions - 1``."""
    ordered = sorted(brokers, key=lambda b: b.node_id)
    if partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > len(ordered):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(ordered)}.")
    with_rack = sum(1 for b in ordered if b.rack is not None)
    if 0 < with_rack < len(ordered):
        raise InvalidReplicaAssignmentError(
            "Not all brokers have rack information for replica rack aware assignment.")
    rng = rng or random.Random()
    count = len(ordered)
    start = start_index if start_index is not None else rng.randrange(count)
    shift = start_index if start_index is not None else rng.randrange(count)
    if with_rack:
        racks = {b.node_id: str(b.rack) for b in ordered}
        return _rack_aware(racks, partitions, replication_factor, start, shift,
                           max(0, first_partition))
    ids = [b.node_id for b in ordered]
    result: Assignment = {}
    for partition in range(max(0, first_partition), max(0, first_partition) + partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (partition + start) % count
        result[partition] = (ids[first], *(
            ids[_follower_index(first, shift, j, count)] for j in range(replication_factor - 1)
        ))
    return result


def assign_added_partitions(
    brokers: Iterable[BrokerInfo],
    current: Sequence[Sequence[int]],
    total: int,
    *,
    rng: random.Random | None = None,
) -> Assignment:
    """Replicas for partitions ``len(current) .. total - 1`` of a topic whose partition ``p``
    has replicas ``current[p]``: partition 0's replication factor, started at the first broker
    (in id order) whose id is at least partition 0's preferred leader, as Kafka does."""
    if not current or not current[0]:
        raise InvalidReplicaAssignmentError("The topic has no replicas for partition 0.")
    ordered = sorted(brokers, key=lambda b: b.node_id)
    leader0 = current[0][0]
    start = next((i for i, b in enumerate(ordered) if b.node_id >= leader0), 0)
    return assign_replicas(ordered, total - len(current), len(current[0]), start_index=start,
                           first_partition=len(current), rng=rng)


def rack_alternated(racks: dict[int, str]) -> list[int]:
    """Broker ids ordered so that consecutive brokers are in different racks where possible."""
    by_rack: dict[str, list[int]] = {}
    for node_id in sorted(racks):
        by_rack.setdefault(racks[node_id], []).append(node_id)
    queues = [by_rack[rack] for rack in sorted(by_rack)]
    result: list[int] = []
    depth = 0
    while len(result) < len(racks):
        result.extend(queue[depth] for queue in queues if depth < len(queue))
        depth += 1
    return result


def _rack_aware(racks: dict[int, str], partitions: int, replication_factor: int, start: int,
                shift: int, first_partition: int) -> Assignment:
    arranged = rack_alternated(racks)
    count = len(arranged)
    rack_count = len(set(racks.values()))
    result: Assignment = {}
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (partition + start) % count
        leader = arranged[first]
        replicas = [leader]
        used_racks = {racks[leader]}
        step = 0
        while len(replicas) < replication_factor:
            candidate = arranged[_follower_index(first, shift * rack_count, step, count)]
            step += 1
            rack_ok = racks[candidate] not in used_racks or len(used_racks) == rack_count
            if rack_ok and candidate not in replicas:
                replicas.append(candidate)
                used_racks.add(racks[candidate])
        result[partition] = tuple(replicas)
    return result


def _follower_index(first: int, shift: int, follower: int, count: int) -> int:
    """Index of the ``follower``-th follower of the replica at index ``first`` (count > 1)."""
    return (first + 1 + (shift + follower) % (count - 1)) % count
