"""The exactly-once checker: a pure function over a consume-transform-produce run's history
(:mod:`~strom.testing.chaos.eos_loop`'s ``txn`` operations and the readers' ``poll`` events),
the final read of the input topic, the final reads of the output topic at both isolation
levels and the group's committed offsets.

An output value is ``<input value>@<transaction name>``, so every output names the input it
stands for and the transaction that wrote it. The output side is the transactional checker's
(:func:`~strom.testing.chaos.txn_checker.check_transactions`: committed transactions whole,
aborted ones never visible to read_committed — during the run or after —, unknown ones all or
nothing, no transaction left open, order within a transaction); on top of it:

==============================  ==============================================================
``input-lost``                  an input (in the final read of the input topic) with no
                                output in the final read_committed read
``input-duplicated``            an input with more than one output there (the issue's
                                symptom: a transaction replayed after its offsets were lost)
``input-order``                 the outputs of one input partition, in output-offset order,
                                not in input-offset order (each input's first output)
``offsets-mismatch``            the group's committed offset of an input partition is not its
                                end (the number of inputs it holds) after the run
``offsets-after-restart``       after a clean restart of the cluster (a
                                ``committed-after-restart`` event), a committed offset that
                                is not the one the last committed transaction sent
``resumed-elsewhere``           the first transaction after such a restart that takes inputs
                                of a partition does not start at its committed offset
==============================  ==============================================================

Unknown transactions (``info`` or not completed) count as committed exactly when their
outputs are visible in the final read_committed read; that is what the offsets-after-restart
check holds the committed offsets to. Stats: ``inputs``, ``outputs-committed``,
``txn-committed`` / ``txn-aborted`` / ``txn-unknown``, ``duplicates`` (extra outputs),
``polled``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from strom.testing.chaos.checker import CheckResult
from strom.testing.chaos.history import Op
from strom.testing.chaos.model import ReadRecord
from strom.testing.chaos.txn_checker import TxnReads, check_transactions, transactions

INPUT_LOST = "input-lost"
INPUT_DUPLICATED = "input-duplicated"
INPUT_ORDER = "input-order"
OFFSETS_MISMATCH = "offsets-mismatch"
OFFSETS_AFTER_RESTART = "offsets-after-restart"
RESUMED_ELSEWHERE = "resumed-elsewhere"
EOS_ANOMALIES = (INPUT_LOST, INPUT_DUPLICATED, INPUT_ORDER, OFFSETS_MISMATCH,
                 OFFSETS_AFTER_RESTART, RESUMED_ELSEWHERE)
#: the event the schedule records with the committed offsets read after a cluster restart.
COMMITTED_AFTER_RESTART = "committed-after-restart"
MAX_EXAMPLES = 20


@dataclass(frozen=True)
class EosReads:
    """``inputs``: the input topic, partition → records (every record, read_uncommitted);
    ``output``: the output topic's final reads; ``committed``: the group's committed offset
    per input partition after the run (absent: none)."""

    inputs: Mapping[int, Sequence[ReadRecord]]
    output: TxnReads
    committed: Mapping[int, int]


def input_of(output_value: str) -> str:
    """The input an output value stands for."""
    return output_value.rpartition("@")[0]


def txn_of(output_value: str) -> str:
    return output_value.rpartition("@")[2]


def check_eos(ops: Sequence[Op], reads: EosReads) -> CheckResult:
    result = check_transactions(ops, reads.output)
    for name in EOS_ANOMALIES:
        result.anomalies[name] = []
        result.counts[name] = 0

    def add(kind: str, **example: Any) -> None:
        result.counts[kind] += 1
        if len(result.anomalies[kind]) < MAX_EXAMPLES:
            result.anomalies[kind].append(example)

    where = {r.value: (p, r.offset) for p, records in reads.inputs.items() for r in records}
    outputs: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for partition, records in reads.output.committed.items():
        for record in records:
            outputs[input_of(record.value)].append((partition, record.offset, record.value))
    duplicates = 0
    for value, (partition, offset) in where.items():
        found = outputs.get(value, [])
        if not found:
            add(INPUT_LOST, input=value, partition=partition, offset=offset)
        elif len(found) > 1:
            duplicates += len(found) - 1
            add(INPUT_DUPLICATED, input=value, outputs=[v for _p, _o, v in found])
    _check_order(add, reads, where)
    for partition, records in reads.inputs.items():
        end = records[-1].offset + 1 if records else 0
        if reads.committed.get(partition, 0) != end:
            add(OFFSETS_MISMATCH, partition=partition, committed=reads.committed.get(partition),
                end=end)
    visible = {txn_of(r.value) for records in reads.output.committed.values() for r in records}
    _check_restarts(add, ops, visible)
    stats = result.stats
    stats["inputs"] = len(where)
    stats["outputs-committed"] = sum(len(r) for r in reads.output.committed.values())
    stats["duplicates"] = duplicates
    return result


def _check_order(add: Any, reads: EosReads, where: Mapping[str, tuple[int, int]]) -> None:
    """Per output partition and input partition, input offsets rise with output offsets
    (the first output of each input: later ones are duplicates, reported as such)."""
    seen: set[str] = set()
    for out_partition, records in reads.output.committed.items():
        last: dict[int, int] = {}
        for record in records:
            value = input_of(record.value)
            source = where.get(value)
            if source is None or value in seen:
                continue  # not an input (the transactional checker's ``unexpected``) or again
            seen.add(value)
            partition, offset = source
            if offset <= last.get(partition, -1):
                add(INPUT_ORDER, output_partition=out_partition, output_offset=record.offset,
                    input=input_of(record.value), after_input_offset=last[partition])
            last[partition] = max(last.get(partition, -1), offset)


def _check_restarts(add: Any, ops: Sequence[Op], visible: set[str]) -> None:
    """At each ``committed-after-restart`` event, the committed offsets are those of the
    last committed transaction before it, per partition; the next transactions start
    there."""
    txn_ops = [op for op in ops if op.f == "txn" and op.type == "invoke"]
    committed_txns = {t.name for t in transactions(ops) if t.outcome == "committed"} | visible
    for event in (op for op in ops if op.f == COMMITTED_AFTER_RESTART):
        expected: dict[int, int] = {}
        for op in txn_ops:
            if op.index < event.index and str(op.value["txn"]) in committed_txns:
                for partition, offset in op.value["offsets"]:
                    expected[int(partition)] = max(expected.get(int(partition), 0), int(offset))
        found = {int(p): int(o) for p, o in dict(event.value["offsets"]).items()}
        for partition in sorted(set(expected) | set(found)):
            if found.get(partition) != expected.get(partition):
                add(OFFSETS_AFTER_RESTART, partition=partition, committed=found.get(partition),
                    expected=expected.get(partition))
        first: dict[int, int] = {}
        for op in txn_ops:
            if op.index > event.index:
                for partition, offset, _value in op.value["inputs"]:
                    first.setdefault(int(partition), int(offset))
        for partition, offset in first.items():
            if offset != found.get(partition, 0):
                add(RESUMED_ELSEWHERE, partition=partition, first_input_offset=offset,
                    committed=found.get(partition))
