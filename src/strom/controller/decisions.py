"""The controller's decisions about partition leadership, as pure functions.

Each decision reads a :class:`MetadataImage` and the brokers that count as live and returns
the :class:`~strom.metadata.changes.SetPartitions` changes to write (one per topic touched),
nothing else: the store write (fenced by the controller epoch) is the commit, and a decision
is re-run against the next image when the write loses a race. They are idempotent — run
against the image their own changes produce, they return no changes.

Rules (Kafka's ZooKeeper-mode controller, as strom applies them):

* **A leader change always bumps the leader epoch**, and the leader is in the ISR or -1
  (:mod:`strom.metadata.changes` checks both).
* **Lost leader** (:func:`reconcile`): the first live ISR member in replica order leads
  (Kafka's ``OfflinePartitionLeaderElection``); ISR = ISR ∩ live. No live ISR member: when
  unclean election is allowed for the topic, the first live replica leads with ISR = [it];
  otherwise leader -1 and the ISR keeps one member (the last leader), so that member's
  return brings the partition back.
* **Lost follower**: removed from the ISR *without* bumping the epoch (the leader adopts
  ISRs written for its epoch).
* **Shutting-down brokers** (controlled shutdown) count as live for the ISR and for
  leadership when no other ISR member can lead (Kafka leaves those partitions to the broker
  and reports them as remaining), but lose leadership to any other live ISR member and are
  removed from ISRs that keep another member.
* **Preferred election** moves leadership to the first replica when it is live and in
  the ISR; **unclean election** gives a leaderless partition any live replica.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from strom.metadata.changes import NO_LEADER, MetadataChange, SetPartitions
from strom.metadata.image import MetadataImage, PartitionInfo, TopicInfo

#: Whether unclean leader election is allowed for a topic (its config, else the broker's).
UncleanPolicy = Callable[[TopicInfo], bool]


def never_unclean(topic: TopicInfo) -> bool:
    return False


def reconcile(image: MetadataImage, live: Collection[int], *,
              shutting_down: Collection[int] = (),
              unclean: UncleanPolicy = never_unclean) -> list[MetadataChange]:
    """Partition states that match the live brokers: leaders re-elected for partitions whose
    leader is gone (or shutting down, or -1 with an ISR member back), dead replicas out of
    ISRs. ``live`` includes the brokers in ``shutting_down``."""
    alive = frozenset(live)
    leaving = frozenset(shutting_down) & alive
    return _per_partition(image, lambda topic, p: _reconciled(p, alive, leaving,
                                                              lambda: unclean(topic)))


def _reconciled(p: PartitionInfo, live: frozenset[int], leaving: frozenset[int],
                unclean: Callable[[], bool]) -> PartitionInfo:
    """``unclean`` is asked only for a partition without a live ISR member (reading a
    topic's config for every partition made each reconcile cost a config lookup each)."""
    isr = tuple(r for r in p.isr if r in live)
    staying = tuple(r for r in isr if r not in leaving)
    leader = p.leader
    if leader == NO_LEADER or leader not in live or leader in leaving:
        candidates = [r for r in p.replicas if r in staying]
        if not candidates and leader in leaving:
            candidates = [leader]  # nobody else can lead: it keeps the partition for now
        if not candidates:
            candidates = [r for r in p.replicas if r in isr]  # e.g. a shutting-down follower
        if candidates:
            leader = candidates[0]
        elif (out_of_sync := [r for r in p.replicas if r in live]) and unclean():
            leader, isr = out_of_sync[0], (out_of_sync[0],)
        else:
            leader = NO_LEADER
    if leader != NO_LEADER:
        # shutting-down members leave the ISR, unless they still lead it
        isr = tuple(r for r in isr if r not in leaving or r == leader)
    elif not isr:
        # offline: the ISR keeps one member (the last leader if it was one)
        isr = (p.leader,) if p.leader in p.isr else p.isr[:1]
    if leader == p.leader and isr == p.isr:
        return p
    epoch = p.leader_epoch + 1 if leader != p.leader else p.leader_epoch
    return dataclasses.replace(p, leader=leader, leader_epoch=epoch, isr=isr)


def remaining_after_shutdown(image: MetadataImage, broker: int) -> list[tuple[str, int]]:
    """The partitions ``broker`` still leads that have other replicas (a controlled shutdown
    waits for these; partitions with it as the only replica do not hold it back)."""
    return [(topic.name, p.partition) for topic in image.topics.values()
            for p in topic.partitions if p.leader == broker and len(p.replicas) > 1]


class ElectionType(enum.IntEnum):
    """ElectLeaders' ``election_type``."""

    PREFERRED = 0
    UNCLEAN = 1


class ElectionOutcome(enum.Enum):
    """A partition's result of an election (the Kafka error each one is answered with)."""

    ELECTED = "NONE"
    NOT_NEEDED = "ELECTION_NOT_NEEDED"
    PREFERRED_NOT_AVAILABLE = "PREFERRED_LEADER_NOT_AVAILABLE"
    NO_ELIGIBLE_LEADER = "ELIGIBLE_LEADERS_NOT_AVAILABLE"
    UNKNOWN_PARTITION = "UNKNOWN_TOPIC_OR_PARTITION"


@dataclass(frozen=True, slots=True)
class Election:
    """What an election decided: the changes to write and each partition's outcome."""

    changes: list[MetadataChange]
    outcomes: dict[tuple[str, int], ElectionOutcome]


def elect_leaders(image: MetadataImage, live: Collection[int], kind: ElectionType,
                  partitions: Iterable[tuple[str, int]] | None = None) -> Election:
    """Elect leaders of ``partitions`` (None: every partition) by ``kind``."""
    alive = frozenset(live)
    wanted = ([(t.name, p.partition) for t in image.topics.values() for p in t.partitions]
              if partitions is None else list(partitions))
    outcomes: dict[tuple[str, int], ElectionOutcome] = {}
    updated: dict[str, dict[int, PartitionInfo]] = {}
    for name, index in wanted:
        topic = image.topics.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            outcomes[(name, index)] = ElectionOutcome.UNKNOWN_PARTITION
            continue
        p = topic.partitions[index]
        new, outcome = (_preferred(p, alive) if kind == ElectionType.PREFERRED
                        else _unclean(p, alive))
        outcomes[(name, index)] = outcome
        if new is not p:
            updated.setdefault(name, {})[index] = new
    return Election(partition_changes(updated), outcomes)


def _preferred(p: PartitionInfo, live: frozenset[int]) -> tuple[PartitionInfo, ElectionOutcome]:
    preferred = p.replicas[0]
    if p.leader == preferred:
        return p, ElectionOutcome.NOT_NEEDED
    if preferred not in live or preferred not in p.isr:
        return p, ElectionOutcome.PREFERRED_NOT_AVAILABLE
    return (dataclasses.replace(p, leader=preferred, leader_epoch=p.leader_epoch + 1),
            ElectionOutcome.ELECTED)


def _unclean(p: PartitionInfo, live: frozenset[int]) -> tuple[PartitionInfo, ElectionOutcome]:
    if p.leader != NO_LEADER and p.leader in live:
        return p, ElectionOutcome.NOT_NEEDED
    new = _reconciled(p, live, frozenset(), unclean=lambda: True)
    if new.leader == NO_LEADER:
        return p, ElectionOutcome.NO_ELIGIBLE_LEADER
    return new, ElectionOutcome.ELECTED


def imbalanced(image: MetadataImage, live: Collection[int],
               percentage: int) -> list[tuple[str, int]]:
    """Partitions to hand back to their preferred leader (``auto.leader.rebalance.enable``):
    for each live broker whose share of partitions it prefers but does not lead is above
    ``percentage`` (``leader.imbalance.per.broker.percentage``), those of its partitions
    whose preferred election can succeed."""
    alive = frozenset(live)
    preferred: dict[int, list[tuple[str, int, PartitionInfo]]] = {}
    for topic in image.topics.values():
        for p in topic.partitions:
            preferred.setdefault(p.replicas[0], []).append((topic.name, p.partition, p))
    due: list[tuple[str, int]] = []
    for broker, owned in sorted(preferred.items()):
        if broker not in alive:
            continue
        elsewhere = [(t, i, p) for t, i, p in owned if p.leader != broker]
        if len(elsewhere) * 100 > percentage * len(owned):
            due.extend((t, i) for t, i, p in elsewhere if broker in p.isr)
    return due


def _per_partition(image: MetadataImage,
                   decide: Callable[[TopicInfo, PartitionInfo], PartitionInfo]
                   ) -> list[MetadataChange]:
    updated: dict[str, dict[int, PartitionInfo]] = {}
    for topic in image.topics.values():
        for p in topic.partitions:
            new = decide(topic, p)
            if new != p:
                updated.setdefault(topic.name, {})[p.partition] = new
    return partition_changes(updated)


def partition_changes(updated: Mapping[str, Mapping[int, PartitionInfo]]
                      ) -> list[MetadataChange]:
    """One ``SetPartitions`` per topic of ``updated`` (topic → partition → new state)."""
    return [SetPartitions(name, tuple(parts[i] for i in sorted(parts)))
            for name, parts in sorted(updated.items())]
