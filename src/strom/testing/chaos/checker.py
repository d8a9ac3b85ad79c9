"""The checker: a pure function over a run's history, the final reads and the replicas' logs,
in the spirit of Jepsen's queue workload (one topic, values unique per send).

Anomaly classes (each a key of :attr:`CheckResult.anomalies`, with examples):

==========================  =================================================================
``lost``                    an acknowledged send (``ok``) whose value the final read lacks
``ack-offset-mismatch``     an acknowledged value read back elsewhere than its ack said
``duplicated``              a value present more than once in the final read
``unexpected``              a value read (finally or by a reader) that no send invoked
``failed-but-read``         a value whose send certainly failed (``fail``) yet was read back
``offset-gap``              consecutive offsets in a partition's final read differ by > 1
``offset-reuse``            one offset twice in a partition's final read, or offsets going back
``divergent-replicas``      two replicas, or a replica and the final read, disagree on the
                            record at one offset
``replica-missing``         a committed offset (in the final read, at or past the replica's
                            log start) that a replica's log lacks
``replica-topic-id``        a replica whose ``partition.metadata`` names another topic id
                            than the topic's (when the run knows it) or than the other
                            replicas' — a log of a deleted topic of the same name
``read-then-vanished``      a record a reader saw during the run (so below the high
                            watermark) that the final read has not at that offset
``acked-below-min-isr``     a send acknowledged on fewer than min.insync.replicas replicas
                            (see "Judging min.insync.replicas" below)
``unclean-election``        a new leader outside the ISR of the state just before (judged only
                            where no state change was missed), unless unclean election is on
==========================  =================================================================

Unknown outcomes (``info``, or invokes never completed) may be present or absent: neither
counts. The counts in :attr:`CheckResult.stats` say how much was checked.

Judging min.insync.replicas. What Kafka guarantees for acks=all: when the leader
acknowledges, the record is on every member of *the leader's* ISR at that moment, and that
ISR has at least min.insync.replicas members. The leader's ISR is not the store's: the
controller may shrink the store's ISR (a follower's session expired) while the leader, cut
off from the store, still counts that follower and acknowledges once it has the record — as
ZooKeeper-mode Kafka does; nothing is lost. So:

* an ``ok`` carrying a witness — ``holders`` (the brokers whose log held the value at the
  acknowledged offset when the leader answered) and ``leader_isr`` (the leader's ISR then),
  which only the deterministic simulation can know — is judged by it: an anomaly when
  fewer than min.insync.replicas held the record, when the leader's ISR was that small, or
  when a member of the leader's ISR lacked the record;
* an ``ok`` without one (real processes: the leader's view is not observable) whose offset
  the replicas' copies hold is judged against the ISRs of the leader epoch its batch carries
  — the leader that appended it, even one already deposed that a follower still fetched
  from: every state of that epoch written before the ack (ZooKeeper's mtime; a poll may see
  it late). An anomaly when all of them were below min.insync.replicas and none was missed;
* otherwise it is judged
  against the observed ``partition-state`` ISRs, conservatively: against every ISR the
  acknowledging leader may still have held — the state in effect at the invoke, every state
  up to the ack (written before it: ZooKeeper's mtime, which a poll may see late), and
  every earlier state of the same leader epoch (a leader learns its ISR
  only from the store, at the earliest from the state that began its epoch). An anomaly only
  when all of those were below min.insync.replicas, and only where no state in that window
  was missed (versions consecutive, from 0). Left out, so not flagged: an acknowledgement from a
  deposed leader (an older epoch) that a producer with stale metadata reached.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from strom.testing.chaos.history import Op, completions
from strom.testing.chaos.model import PartitionState, ReadRecord, ReplicaLog

LOST = "lost"
ACK_MISMATCH = "ack-offset-mismatch"
DUPLICATED = "duplicated"
UNEXPECTED = "unexpected"
FAILED_BUT_READ = "failed-but-read"
OFFSET_GAP = "offset-gap"
OFFSET_REUSE = "offset-reuse"
DIVERGENT = "divergent-replicas"
REPLICA_MISSING = "replica-missing"
REPLICA_TOPIC_ID = "replica-topic-id"
READ_VANISHED = "read-then-vanished"
BELOW_MIN_ISR = "acked-below-min-isr"
UNCLEAN = "unclean-election"
ANOMALIES = (LOST, ACK_MISMATCH, DUPLICATED, UNEXPECTED, FAILED_BUT_READ, OFFSET_GAP,
             OFFSET_REUSE, DIVERGENT, REPLICA_MISSING, REPLICA_TOPIC_ID, READ_VANISHED,
             BELOW_MIN_ISR, UNCLEAN)

#: ``f`` of the history's operations the checker reads.
SEND = "send"
POLL = "poll"
PARTITION_STATE = "partition-state"


@dataclass(frozen=True)
class CheckConfig:
    min_insync_replicas: int = 1
    unclean_leader_election: bool = False
    #: examples kept per anomaly class (the counts are always complete).
    max_examples: int = 20


@dataclass
class CheckResult:
    """``valid`` is True when no anomaly class has an instance."""

    anomalies: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return not any(self.counts.values())

    def summary(self) -> str:
        found = ", ".join(f"{name}={n}" for name, n in self.counts.items() if n) or "none"
        stats = ", ".join(f"{name}={n}" for name, n in self.stats.items())
        return f"valid={self.valid} anomalies: {found}; {stats}"


class _Collector:
    def __init__(self, config: CheckConfig) -> None:
        self.result = CheckResult(anomalies={name: [] for name in ANOMALIES},
                                  counts=dict.fromkeys(ANOMALIES, 0))
        self.limit = config.max_examples

    def add(self, kind: str, **example: Any) -> None:
        self.result.counts[kind] += 1
        if len(self.result.anomalies[kind]) < self.limit:
            self.result.anomalies[kind].append(example)


def partition_states(ops: Iterable[Op]) -> list[PartitionState]:
    """The ``partition-state`` observations of a history, in order."""
    return [PartitionState(op.time, int(op.value["partition"]), int(op.value["leader"]),
                           int(op.value["leader_epoch"]), tuple(op.value["isr"]),
                           int(op.value["version"]), _written(op))
            for op in ops if op.f == PARTITION_STATE and op.type == "ok"]


def _written(op: Op) -> float | None:
    """When ZooKeeper wrote the observed state, on the history's time axis (its znode mtime
    and the observation's wall clock: one machine, one clock), never after the observation."""
    mtime = op.value.get("mtime")
    return None if mtime is None else op.time - max(0.0, op.wall - float(mtime))


def check(ops: Sequence[Op], final_reads: Mapping[int, Sequence[ReadRecord]],
          replica_logs: Mapping[int, Mapping[int, ReplicaLog]] | None = None,
          config: CheckConfig | None = None, *, topic_id: str | None = None) -> CheckResult:
    """Check one run. ``final_reads``: partition → the records read from the beginning to the
    end after the run; ``replica_logs``: partition → broker → that broker's copy;
    ``topic_id``: the topic's id (Kafka's text form) if the run knows it."""
    config = config or CheckConfig()
    out = _Collector(config)
    done = completions(list(ops))
    sends = [op for op in ops if op.f == SEND and op.type == "invoke"]
    invoked = {str(op.value["value"]) for op in sends}
    outcome = {str(op.value["value"]): done.get(op.index) for op in sends}
    read_at = _read_index(final_reads)
    places: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for partition, records in final_reads.items():
        for record in records:
            places[record.value].append((partition, record.offset))

    stats = Counter(sends=len(sends), read=sum(len(r) for r in final_reads.values()))
    for value, completion in outcome.items():
        kind = completion.type if completion else "info"
        stats[f"send-{kind}"] += 1
        if kind == "ok" and completion is not None:
            _check_acknowledged(out, value, completion, places.get(value, []))
        elif kind == "fail" and value in places:
            out.add(FAILED_BUT_READ, value=value, at=places[value],
                    error=completion.value.get("error") if completion else None)
        elif kind == "info" and value in places:
            stats["send-info-present"] += 1
    for value, where in places.items():
        if len(where) > 1:
            out.add(DUPLICATED, value=value, at=sorted(where))
        if value not in invoked:
            out.add(UNEXPECTED, value=value, at=where, source="final read")
    for partition, records in final_reads.items():
        _check_offsets(out, partition, records)
    polls = [op for op in ops if op.f == POLL and op.type == "ok"]
    stats["polled"] = len(polls)
    for op in polls:
        _check_poll(out, op, invoked, read_at)
    if replica_logs:
        for partition, replicas in replica_logs.items():
            stats["replicas"] += len(replicas)
            _check_replicas(out, partition, replicas, read_at.get(partition, {}))
            _check_topic_ids(out, partition, replicas, topic_id)
    states = partition_states(ops)
    stats["partition-states"] = len(states)
    _check_min_isr(out, ops, done, states, config.min_insync_replicas,
                   _epoch_finder(replica_logs or {}))
    if not config.unclean_leader_election:
        _check_elections(out, states)
    out.result.stats = dict(stats)
    return out.result


def _read_index(final_reads: Mapping[int, Sequence[ReadRecord]]) -> dict[int, dict[int, str]]:
    return {partition: {r.offset: r.value for r in records}
            for partition, records in final_reads.items()}


def _check_acknowledged(out: _Collector, value: str, ack: Op,
                        where: list[tuple[int, int]]) -> None:
    acked_at = (int(ack.value.get("partition", -1)), int(ack.value.get("offset", -1)))
    if not where:
        out.add(LOST, value=value, acked_at=acked_at)
    elif acked_at not in where:
        out.add(ACK_MISMATCH, value=value, acked_at=acked_at, read_at=where)


def _check_offsets(out: _Collector, partition: int, records: Sequence[ReadRecord]) -> None:
    for before, after in pairwise(records):
        if after.offset <= before.offset:
            out.add(OFFSET_REUSE, partition=partition, offset=after.offset,
                    values=[before.value, after.value])
        elif after.offset != before.offset + 1:
            out.add(OFFSET_GAP, partition=partition, after=before.offset, next=after.offset)


def _check_poll(out: _Collector, op: Op, invoked: set[str],
                read_at: Mapping[int, Mapping[int, str]]) -> None:
    value, partition, offset = str(op.value["value"]), int(op.value["partition"]), \
        int(op.value["offset"])
    if value not in invoked:
        out.add(UNEXPECTED, value=value, at=[(partition, offset)], source=op.process)
    final = read_at.get(partition, {}).get(offset)
    if final != value:
        out.add(READ_VANISHED, value=value, partition=partition, offset=offset,
                reader=op.process, final=final, time=round(op.time, 3))


def _check_replicas(out: _Collector, partition: int, replicas: Mapping[int, ReplicaLog],
                    final: Mapping[int, str]) -> None:
    logs = {broker: {r.offset: r.value for r in log.records}
            for broker, log in replicas.items()}
    for broker, log in sorted(replicas.items()):
        own = logs[broker]
        for offset, value in own.items():
            if offset in final and final[offset] != value:
                out.add(DIVERGENT, partition=partition, offset=offset,
                        replicas={broker: value, "final-read": final[offset]})
        missing = [o for o in sorted(final) if o >= log.log_start and o not in own]
        if missing:
            out.add(REPLICA_MISSING, partition=partition, broker=broker,
                    first=missing[0], count=len(missing))
    brokers = sorted(logs)
    for i, a in enumerate(brokers):
        for b in brokers[i + 1:]:
            for offset in sorted(set(logs[a]) & set(logs[b]) - set(final)):
                if logs[a][offset] != logs[b][offset]:
                    out.add(DIVERGENT, partition=partition, offset=offset,
                            replicas={a: logs[a][offset], b: logs[b][offset]})


def _check_topic_ids(out: _Collector, partition: int, replicas: Mapping[int, ReplicaLog],
                     topic_id: str | None) -> None:
    """Every replica names the topic's id, or (unknown) the id most replicas name."""
    ids = Counter(log.topic_id for log in replicas.values())
    expected = topic_id if topic_id is not None else (
        ids.most_common(1)[0][0] if ids else None)
    for broker, log in sorted(replicas.items()):
        if log.topic_id != expected:
            out.add(REPLICA_TOPIC_ID, partition=partition, broker=broker,
                    topic_id=log.topic_id, expected=expected)


def _epoch_finder(replica_logs: Mapping[int, Mapping[int, ReplicaLog]]
                  ) -> Callable[[int, int], int | None]:
    """(partition, offset) → the leader epoch of the batch holding it in the replicas' copies
    (the first copy that holds it; None when none does)."""
    def epoch_at(partition: int, offset: int) -> int | None:
        for replica in replica_logs.get(partition, {}).values():
            if (epoch := replica.leader_epoch_at(offset)) is not None:
                return epoch
        return None
    return epoch_at


def _check_min_isr(out: _Collector, ops: Sequence[Op], done: Mapping[int, Op],
                   states: Sequence[PartitionState], min_isr: int,
                   epoch_at: Callable[[int, int], int | None]) -> None:
    """See "Judging min.insync.replicas" in the module docstring."""
    if min_isr <= 1:
        return
    by_partition: dict[int, list[PartitionState]] = defaultdict(list)
    for state in states:
        by_partition[state.partition].append(state)
    for op in ops:
        ack = done.get(op.index) if op.f == SEND and op.type == "invoke" else None
        if ack is None or ack.type != "ok":
            continue
        where = {"value": ack.value.get("value", op.value.get("value")),
                 "partition": ack.value.get("partition"), "offset": ack.value.get("offset")}
        if "holders" in ack.value:
            holders = set(ack.value["holders"])
            leader_isr = set(ack.value.get("leader_isr", holders))
            if len(holders) < min_isr or len(leader_isr) < min_isr \
                    or not leader_isr <= holders:
                out.add(BELOW_MIN_ISR, **where, holders=sorted(holders),
                        leader_isr=sorted(leader_isr))
            continue
        partition = int(ack.value.get("partition", -1))
        offset = ack.value.get("offset")
        epoch = epoch_at(partition, int(offset)) if offset is not None else None
        history = by_partition.get(partition, [])
        views = (_possible_isr_views(history, op.time, ack.time) if epoch is None
                 else _epoch_isr_views(history, epoch, ack.time))
        if views and all(len(s.isr) < min_isr for s in views):
            out.add(BELOW_MIN_ISR, **where, isr=[list(s.isr) for s in views])


def _possible_isr_views(history: Sequence[PartitionState], invoke: float,
                        ack: float) -> list[PartitionState]:
    """The states whose ISR the leader acknowledging between ``invoke`` and ``ack`` may have
    held (module docstring); empty when unknown: no state before the invoke, or a version
    gap (a missed state) within or just before (znode versions count from 0)."""
    at_invoke = sum(1 for s in history if s.time <= invoke) - 1
    if at_invoke < 0:
        return []
    start = at_invoke
    while start > 0 and history[start - 1].leader_epoch == history[at_invoke].leader_epoch:
        start -= 1
    end = at_invoke + 1
    # a state written before the ack counts even when the poll saw it after: the leader holds
    # an ISR it wrote itself (an expansion) from the moment ZooKeeper accepted it
    while end < len(history) and _effective(history[end]) <= ack:
        end += 1
    views = list(history[start:end])
    # the state before the window: a missed one in between may have begun the epoch
    previous_version = history[start - 1].version if start > 0 else -1
    if views[0].version != previous_version + 1 \
            or any(b.version != a.version + 1 for a, b in pairwise(views)):
        return []
    return views


def _epoch_isr_views(history: Sequence[PartitionState], epoch: int,
                     ack: float) -> list[PartitionState]:
    """The states whose ISR the leader of ``epoch`` — the one that appended the record —
    may have held when it acknowledged at ``ack``: that epoch's states written before the
    ack; empty when unknown (none seen, or one missed: versions not consecutive)."""
    indexes = [i for i, s in enumerate(history)
               if s.leader_epoch == epoch and _effective(s) <= ack]
    if not indexes:
        return []
    first, last = indexes[0], indexes[-1]
    views = list(history[first:last + 1])
    previous_version = history[first - 1].version if first > 0 else -1
    if views[0].version != previous_version + 1 \
            or any(b.version != a.version + 1 for a, b in pairwise(views)) \
            or any(s.leader_epoch != epoch for s in views):
        return []
    return views


def _effective(state: PartitionState) -> float:
    return state.time if state.written is None else min(state.time, state.written)


def _check_elections(out: _Collector, states: Sequence[PartitionState]) -> None:
    last: dict[int, PartitionState] = {}
    for state in states:
        previous = last.get(state.partition)
        last[state.partition] = state
        if previous is None or state.version != previous.version + 1:
            continue  # first sight, or changes were missed: nothing to judge
        if state.leader >= 0 and state.leader != previous.leader \
                and state.leader not in previous.isr:
            out.add(UNCLEAN, partition=state.partition, leader=state.leader,
                    leader_epoch=state.leader_epoch, previous_isr=list(previous.isr),
                    time=round(state.time, 3))
