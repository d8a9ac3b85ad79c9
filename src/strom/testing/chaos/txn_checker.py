"""The transaction checker: a pure function over a transactional run's history and the final
reads of its topic, read_committed and read_uncommitted.

The history (written by :mod:`strom.testing.chaos.txn_workload`) holds one ``txn`` operation
per transaction: the invoke's value names the transaction (``txn``) and its records in produce
order (``records``: ``[partition, value]`` pairs, values unique in the run); the completion
says what became of it:

* ``ok`` — committed (``commit_transaction`` returned);
* ``fail`` — certainly not committed: aborted on purpose, or aborted after an error before
  ``commit_transaction`` was called (an EndTxn(commit) that may have reached the coordinator
  makes the outcome unknown, so a commit attempt that raised is ``info``, never ``fail``);
* ``info`` (or no completion) — unknown: committed or aborted, but as a whole.

Readers' ``poll`` events carry ``isolation`` (``read_committed`` / ``read_uncommitted``).

Anomaly classes (keys of :attr:`CheckResult.anomalies`):

============================  ===============================================================
``committed-lost``            a committed transaction with a record the final read_committed
                              read lacks (examples list the missing records)
``aborted-visible``           a record of a failed (aborted) transaction that a
                              read_committed reader saw, during the run or in the final read
``unknown-partial``           an unknown-outcome transaction partly visible to the final
                              read_committed read (some of its records, not all)
``unknown-seen-then-aborted`` a record of an unknown-outcome transaction a read_committed
                              reader saw during the run that the final read_committed read
                              does not show (it was visible, then "aborted")
``txn-order``                 a transaction's records out of produce order within a
                              partition (final reads, by offset)
``duplicated``                a value more than once in a final read
``unexpected``                a value read that no transaction produced
``read-mismatch``             the read_committed and read_uncommitted final reads disagree on
                              the record at an offset, or a reader's record during the run is
                              not at its offset in the final read of its isolation level
``lso-stuck``                 the final read_committed read could not reach the end of a
                              partition (an open transaction never completed)
============================  ===============================================================
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from strom.testing.chaos.checker import CheckResult
from strom.testing.chaos.history import Op, completions
from strom.testing.chaos.model import ReadRecord

COMMITTED_LOST = "committed-lost"
ABORTED_VISIBLE = "aborted-visible"
UNKNOWN_PARTIAL = "unknown-partial"
UNKNOWN_SEEN_THEN_ABORTED = "unknown-seen-then-aborted"
TXN_ORDER = "txn-order"
DUPLICATED = "duplicated"
UNEXPECTED = "unexpected"
READ_MISMATCH = "read-mismatch"
LSO_STUCK = "lso-stuck"
ANOMALIES = (COMMITTED_LOST, ABORTED_VISIBLE, UNKNOWN_PARTIAL, UNKNOWN_SEEN_THEN_ABORTED,
             TXN_ORDER, DUPLICATED, UNEXPECTED, READ_MISMATCH, LSO_STUCK)

TXN = "txn"
POLL = "poll"
READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
MAX_EXAMPLES = 20


@dataclass(frozen=True)
class TxnReads:
    """The final reads of the transactional topic: partition → records, per isolation level;
    ``stuck`` the partitions whose read_committed read could not reach the end."""

    committed: Mapping[int, Sequence[ReadRecord]]
    uncommitted: Mapping[int, Sequence[ReadRecord]]
    stuck: Sequence[int] = ()


@dataclass(frozen=True)
class _Txn:
    name: str
    records: tuple[tuple[int, str], ...]
    outcome: str  # committed / aborted / unknown


@dataclass
class _Collector:
    result: CheckResult = field(default_factory=lambda: CheckResult(
        anomalies={name: [] for name in ANOMALIES}, counts=dict.fromkeys(ANOMALIES, 0)))

    def add(self, kind: str, **example: Any) -> None:
        self.result.counts[kind] += 1
        if len(self.result.anomalies[kind]) < MAX_EXAMPLES:
            self.result.anomalies[kind].append(example)


def transactions(ops: Sequence[Op]) -> list[_Txn]:
    """The ``txn`` operations of a history with their outcomes."""
    done = completions(list(ops))
    found = []
    for op in ops:
        if op.f != TXN or op.type != "invoke":
            continue
        completion = done.get(op.index)
        kind = completion.type if completion is not None else "info"
        outcome = {"ok": "committed", "fail": "aborted"}.get(kind, "unknown")
        records = tuple((int(p), str(v)) for p, v in op.value["records"])
        found.append(_Txn(str(op.value["txn"]), records, outcome))
    return found


def check_transactions(ops: Sequence[Op], reads: TxnReads) -> CheckResult:
    out = _Collector()
    txns = transactions(ops)
    owner = {value: txn for txn in txns for _p, value in txn.records}
    committed_at = _places(reads.committed)
    uncommitted_at = _places(reads.uncommitted)
    stats = Counter(f"txn-{txn.outcome}" for txn in txns)
    stats["read-committed"] = sum(len(r) for r in reads.committed.values())
    stats["read-uncommitted"] = sum(len(r) for r in reads.uncommitted.values())

    for partition in reads.stuck:
        out.add(LSO_STUCK, partition=partition)
    for txn in txns:
        visible = [value for _p, value in txn.records if value in committed_at]
        if txn.outcome == "committed" and len(visible) < len(txn.records):
            missing = [v for _p, v in txn.records if v not in committed_at]
            out.add(COMMITTED_LOST, txn=txn.name, missing=missing)
        elif txn.outcome == "aborted" and visible:
            out.add(ABORTED_VISIBLE, txn=txn.name, visible=visible, source="final read")
        elif txn.outcome == "unknown":
            if 0 < len(visible) < len(txn.records):
                out.add(UNKNOWN_PARTIAL, txn=txn.name, visible=visible)
            stats["txn-unknown-visible" if visible else "txn-unknown-invisible"] += 1
        for where in (committed_at, uncommitted_at):
            _check_order(out, txn, where)
    for label, where in (("read_committed", committed_at), ("read_uncommitted", uncommitted_at)):
        for value, at in where.items():
            if len(at) > 1:
                out.add(DUPLICATED, value=value, at=sorted(at), read=label)
            if value not in owner:
                out.add(UNEXPECTED, value=value, at=at, source=label)
    uncommitted_index = _index(reads.uncommitted)
    for partition, records in reads.committed.items():
        for record in records:
            other = uncommitted_index.get(partition, {}).get(record.offset)
            if other != record.value:
                out.add(READ_MISMATCH, partition=partition, offset=record.offset,
                        read_committed=record.value, read_uncommitted=other)
    finals = {READ_COMMITTED: _index(reads.committed),
              READ_UNCOMMITTED: uncommitted_index}
    polls = [op for op in ops if op.f == POLL and op.type == "ok" and "isolation" in op.value]
    stats["polled"] = len(polls)
    for op in polls:
        _check_poll(out, op, owner, finals)
    out.result.stats = dict(stats)
    return out.result


def _places(reads: Mapping[int, Sequence[ReadRecord]]) -> dict[str, list[tuple[int, int]]]:
    at: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for partition, records in reads.items():
        for record in records:
            at[record.value].append((partition, record.offset))
    return at


def _index(reads: Mapping[int, Sequence[ReadRecord]]) -> dict[int, dict[int, str]]:
    return {p: {r.offset: r.value for r in records} for p, records in reads.items()}


def _check_order(out: _Collector, txn: _Txn, at: Mapping[str, list[tuple[int, int]]]) -> None:
    """Within each partition, a transaction's records (those present) must have increasing
    offsets in produce order, and sit in the partition the producer chose."""
    last: dict[int, int] = {}
    for partition, value in txn.records:
        for read_partition, offset in at.get(value, []):
            if read_partition != partition or offset <= last.get(partition, -1):
                out.add(TXN_ORDER, txn=txn.name, value=value, partition=read_partition,
                        offset=offset, expected_partition=partition)
            last[partition] = max(last.get(partition, -1), offset)


def _check_poll(out: _Collector, op: Op, owner: Mapping[str, _Txn],
                finals: Mapping[str, Mapping[int, Mapping[int, str]]]) -> None:
    value, partition, offset = (str(op.value["value"]), int(op.value["partition"]),
                                int(op.value["offset"]))
    isolation = str(op.value["isolation"])
    txn = owner.get(value)
    if txn is None:
        out.add(UNEXPECTED, value=value, at=[(partition, offset)], source=op.process)
        return
    final = finals.get(isolation, {}).get(partition, {}).get(offset)
    if isolation != READ_COMMITTED:
        if final != value:
            out.add(READ_MISMATCH, value=value, partition=partition, offset=offset,
                    reader=op.process, final=final)
        return
    if txn.outcome == "aborted":
        out.add(ABORTED_VISIBLE, txn=txn.name, visible=[value], source=op.process)
    elif final != value and txn.outcome == "unknown":
        out.add(UNKNOWN_SEEN_THEN_ABORTED, txn=txn.name, value=value, partition=partition,
                offset=offset, reader=op.process)
    elif final != value:
        out.add(READ_MISMATCH, value=value, partition=partition, offset=offset,
                reader=op.process, final=final)
