"""Which replica a consumer should read from (KIP-392, Kafka's ``ReplicaSelector``).

A leader with ``replica.selector.class`` set answers a consumer's Fetch (v11+, replica id
-1, carrying the consumer's ``client.rack`` as ``rack_id``) for a partition with the id of a
*preferred read replica* when the selector picks another replica than itself; that partition
then carries no records and the consumer sends its next fetches there. Followers serve
consumers' fetches up to their own high watermark (learnt from the leader's fetch responses),
so a consumer reading from a follower sees what it would see on the leader, a little later.

Candidates (as Kafka's ``ReplicaManager.findPreferredReadReplica``): the leader itself, and
every follower that is in the ISR, whose broker is registered (a broker without an address
for the client cannot be sent to), whose log end is at or past the fetch offset and whose log
start is at or before it (-1, not yet reported, does not exclude). The rack-aware selector
(Kafka's ``RackAwareReplicaSelector``) then picks:

* no ``rack_id``, or no candidate in that rack: the leader;
* the leader is in that rack: the leader;
* otherwise the candidate of that rack with the highest log end, then the one caught up most
  recently (then the lowest broker id, for a deterministic choice).

Answering with the leader means "read here": the fetch is served as usual. Pure functions of
the partition's state and the metadata image; called on the event-loop thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from strom.common.config import REPLICA_SELECTORS
from strom.metadata.image import BrokerInfo
from strom.replication.partition import Partition

#: The Fetch version from which consumers send ``rack_id`` and may read from followers.
FOLLOWER_FETCH_MIN_VERSION = 11


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One candidate replica: its broker, the broker's rack, its log end and how long ago it
    was last caught up with the leader (0 for the leader)."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_caught_up_ms: int


class ReplicaSelector(Protocol):
    def select(self, client_rack: str, leader: ReplicaView,
               candidates: list[ReplicaView]) -> ReplicaView:
        """The replica the consumer in ``client_rack`` should read from; ``candidates``
        includes ``leader``."""
        ...


class RackAwareReplicaSelector:
    """Kafka's ``RackAwareReplicaSelector`` (see the module doc)."""

    def select(self, client_rack: str, leader: ReplicaView,
               candidates: list[ReplicaView]) -> ReplicaView:
        if not client_rack:
            return leader
        same_rack = [c for c in candidates if c.rack == client_rack]
        if not same_rack or leader in same_rack:
            return leader
        return max(same_rack, key=lambda c: (c.log_end_offset, -c.time_since_caught_up_ms,
                                             -c.broker_id))


def replica_selector(class_name: str | None) -> ReplicaSelector | None:
    """The selector ``replica.selector.class`` names; None (unset): consumers read from the
    leader. The config's validator has already refused any other name."""
    if class_name is None:
        return None
    if class_name not in REPLICA_SELECTORS:
        raise ValueError(f"unknown replica.selector.class {class_name!r}")
    return RackAwareReplicaSelector()


def preferred_read_replica(selector: ReplicaSelector, partition: Partition, client_rack: str,
                           fetch_offset: int, brokers: Mapping[int, BrokerInfo]) -> int:
    """The broker id a consumer fetching ``partition`` at ``fetch_offset`` from this broker
    should read from instead, or -1: read here (this broker is not the leader, or the
    selector chose the leader)."""
    if not partition.is_leader:
        return -1
    now = partition.clock.now_ms()
    in_sync = partition.isr
    local = brokers.get(partition.local_id)
    leader = ReplicaView(partition.local_id, local.rack if local is not None else None,
                         partition.log_end_offset, 0)
    candidates = [leader]
    for state in partition.remote.values():
        broker = brokers.get(state.broker_id)
        if (broker is None or state.broker_id not in in_sync
                or state.log_end_offset < fetch_offset
                or state.log_start_offset > fetch_offset):
            continue
        candidates.append(ReplicaView(state.broker_id, broker.rack, state.log_end_offset,
                                      max(0, now - state.last_caught_up_ms)))
    chosen = selector.select(client_rack, leader, candidates)
    return -1 if chosen.broker_id == partition.local_id else chosen.broker_id
