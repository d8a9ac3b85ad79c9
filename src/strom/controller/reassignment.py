"""Partition reassignment (KIP-455) as pure functions: image + request → changes + results.

The state of a reassignment lives in the partition itself (:class:`PartitionInfo`): while
one is in progress ``replicas`` is the full set — the target replicas, then the original
ones that are leaving — ``adding_replicas`` = full minus original and ``removing_replicas`` =
full minus target. Nothing else is kept, so a new controller picks up where the old one stopped.

Steps (Kafka's ZooKeeper-mode controller):

1. **Start** (:func:`reassign`): replicas := target + original, adding / removing recorded,
   leader epoch + 1 (every replica learns the new set; the adding ones start following).
   A reassignment of a partition already being reassigned starts again from its *original*
   replicas (adding replicas the new target no longer wants are dropped at once).
   Cancellation (target None) is a reassignment back to the original replicas.
2. **Catch up**: the adding replicas fetch from the leader, which adds them to the ISR
   (the replication layer's ISR expansion, written through the store).
3. **Complete** (:func:`progress`, run by the controller on every image): once every target
   replica is in the ISR, one write sets replicas := target, ISR := ISR ∩ target, clears
   adding / removing and bumps the leader epoch; a leader that is not in the target (or not
   live) is replaced by the first target replica, in target order, that is live and in the
   ISR — without one the reassignment waits. A start whose target is already in the ISR
   completes in the same write.

Validation and errors are Kafka's: INVALID_REPLICA_ASSIGNMENT for an empty list, duplicate
or negative ids, or adding replicas on brokers that are not registered;
UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist; NO_REASSIGNMENT_IN_PROGRESS
to cancel where nothing is in progress. A target equal to the current replicas of a partition
that is not being reassigned changes nothing (Kafka would bump the leader epoch).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from strom.controller.decisions import partition_changes
from strom.metadata.changes import NO_LEADER, MetadataChange
from strom.metadata.image import MetadataImage, PartitionInfo

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class ReassignResult:
    """One partition's answer: a Kafka error name ("NONE" when accepted) and message."""

    error: str
    message: str | None = None


ACCEPTED = ReassignResult("NONE")


@dataclass(frozen=True, slots=True)
class Reassignment:
    """What :func:`reassign` decided: the changes to write and each partition's result."""

    changes: list[MetadataChange]
    results: dict[TopicPartition, ReassignResult]


def reassign(image: MetadataImage, live: Collection[int],
             targets: Mapping[TopicPartition, tuple[int, ...] | None],
             allow_replication_factor_change: bool = True) -> Reassignment:
    """Start (or cancel, target None) the reassignment of each partition in ``targets``.
    ``live``: the registered brokers (adding replicas must be among them). Without
    ``allow_replication_factor_change`` (AlterPartitionReassignments v1, KIP-860) a target
    of another size than the partition's replicas (its original ones while it moves) is
    INVALID_REPLICATION_FACTOR, checked after the replicas themselves, as Kafka 4.4."""
    alive = frozenset(live)
    results: dict[TopicPartition, ReassignResult] = {}
    updated: dict[str, dict[int, PartitionInfo]] = {}
    for (name, index), target in targets.items():
        topic = image.topics.get(name)
        current = (topic.partitions[index]
                   if topic is not None and 0 <= index < len(topic.partitions) else None)
        if target is not None and (problem := _invalid(current, target, alive)):
            results[(name, index)] = ReassignResult("INVALID_REPLICA_ASSIGNMENT", problem)
            continue
        if (target is not None and current is not None and not allow_replication_factor_change
                and len(target) != len(current.original_replicas)):
            results[(name, index)] = ReassignResult(
                "INVALID_REPLICATION_FACTOR", f"The replication factor is changed from "
                f"{len(current.original_replicas)} to {len(target)}")
            continue
        if target is None and (current is None or not current.reassigning):
            results[(name, index)] = ReassignResult("NO_REASSIGNMENT_IN_PROGRESS",
                                                    "No partition reassignment is in progress.")
            continue
        if current is None:
            results[(name, index)] = ReassignResult("UNKNOWN_TOPIC_OR_PARTITION",
                                                    "The partition does not exist.")
            continue
        results[(name, index)] = ACCEPTED
        new = _started(current, current.original_replicas if target is None else target,
                       alive)
        if new != current:
            updated.setdefault(name, {})[index] = new
    return Reassignment(partition_changes(updated), results)


def progress(image: MetadataImage, live: Collection[int]) -> list[MetadataChange]:
    """Complete the reassignments whose target replicas are all in the ISR (step 3)."""
    alive = frozenset(live)
    updated: dict[str, dict[int, PartitionInfo]] = {}
    for topic in image.topics.values():
        for p in topic.partitions:
            if p.reassigning and (done := _completed(p, alive)) is not None:
                updated.setdefault(topic.name, {})[p.partition] = done
    return partition_changes(updated)


def ongoing(image: MetadataImage, wanted: Iterable[TopicPartition] | None = None
            ) -> list[tuple[str, PartitionInfo]]:
    """The partitions being reassigned (of ``wanted``, None: all; unknown ones skipped)."""
    if wanted is None:
        return [(t.name, p) for t in image.topics.values() for p in t.partitions
                if p.reassigning]
    found = []
    for name, index in wanted:
        topic = image.topics.get(name)
        if (topic is not None and 0 <= index < len(topic.partitions)
                and (p := topic.partitions[index]).reassigning):
            found.append((name, p))
    return found


def _invalid(current: PartitionInfo | None, target: tuple[int, ...],
             live: frozenset[int]) -> str | None:
    if not target:
        return "Empty replica list specified in partition reassignment."
    if len(set(target)) != len(target):
        return f"Duplicate replica ids in partition reassignment replica list: {_ids(target)}"
    if any(r < 0 for r in target):
        return f"Invalid broker id in replica list: {_ids(target)}"
    original = current.original_replicas if current is not None else ()
    adding = [r for r in target if r not in original]
    if not set(adding) <= live:
        return (f"Replica assignment has brokers that are not alive. Replica list: "
                f"{_ids(adding)}, live broker list: {_ids(sorted(live))}")
    return None


def _started(p: PartitionInfo, target: tuple[int, ...], live: frozenset[int]
             ) -> PartitionInfo:
    original = p.original_replicas
    full = tuple(dict.fromkeys(target + original))
    if full == p.replicas and not p.reassigning and set(target) == set(full):
        return p  # already there
    adding = tuple(r for r in full if r not in original)
    removing = tuple(r for r in full if r not in target)
    isr = tuple(r for r in p.isr if r in full)
    leader = p.leader
    if leader not in full:  # an adding replica led and the reassignment went back on it
        leader = next((r for r in full if r in isr and r in live), NO_LEADER)
    started = dataclasses.replace(p, replicas=full, isr=isr, leader=leader,
                                  leader_epoch=p.leader_epoch + 1, adding_replicas=adding,
                                  removing_replicas=removing)
    if not started.reassigning:  # back to the original replicas: nothing to wait for
        return started
    done = _completed(started, live)
    return dataclasses.replace(done, leader_epoch=p.leader_epoch + 1) if done else started


def _completed(p: PartitionInfo, live: frozenset[int]) -> PartitionInfo | None:
    target = p.target_replicas
    if not set(target) <= set(p.isr):
        return None
    leader = p.leader
    if leader not in target or leader not in live:
        leader = next((r for r in target if r in p.isr and r in live), NO_LEADER)
        if leader == NO_LEADER:
            return None
    return dataclasses.replace(p, leader=leader, leader_epoch=p.leader_epoch + 1,
                               replicas=target, isr=tuple(r for r in p.isr if r in target),
                               adding_replicas=(), removing_replicas=())


def _ids(ids: Iterable[int]) -> str:
    return "[" + ", ".join(map(str, ids)) + "]"
