"""The exactly-once checker over planted histories: a clean consume-transform-produce run
passes, and each anomaly it adds to the transactional checker's is found (each test fails if
the checker misses what it plants)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from strom.testing.chaos import eos_checker
from strom.testing.chaos.eos_checker import COMMITTED_AFTER_RESTART, EosReads, check_eos
from strom.testing.chaos.history import NEMESIS, History
from strom.testing.chaos.model import ReadRecord
from strom.testing.chaos.txn_checker import ABORTED_VISIBLE, TxnReads

# inputs: in-0 p0@0, in-1 p1@0, in-2 p0@1, in-3 p1@1; outputs go to the input's partition
INPUTS = {0: [ReadRecord(0, 0, "in-0"), ReadRecord(0, 1, "in-2")],
          1: [ReadRecord(1, 0, "in-1"), ReadRecord(1, 1, "in-3")]}
WHERE = {r.value: (r.partition, r.offset) for rs in INPUTS.values() for r in rs}


class Run:
    def __init__(self) -> None:
        self.history = History()

    def txn(self, name: str, inputs: Sequence[str], outcome: str) -> None:
        offsets: dict[int, int] = {}
        for value in inputs:
            partition, offset = WHERE[value]
            offsets[partition] = max(offsets.get(partition, 0), offset + 1)
        invoke = self.history.invoke("L0", "txn", {
            "txn": name, "records": [[WHERE[v][0], f"{v}@{name}"] for v in inputs],
            "inputs": [[*WHERE[v], v] for v in inputs], "offsets": sorted(offsets.items())})
        if outcome != "pending":
            self.history.complete(invoke, outcome, {})  # type: ignore[arg-type]

    def restarted(self, offsets: Mapping[int, int]) -> None:
        self.history.event(NEMESIS, "info", COMMITTED_AFTER_RESTART, {"offsets": offsets})


def output(*values: tuple[int, str], uncommitted: Sequence[tuple[int, str]] = ()
           ) -> TxnReads:
    """Final output reads: ``values`` committed (in offset order per partition), plus
    ``uncommitted`` ones only read_uncommitted shows, after them."""
    committed: dict[int, list[ReadRecord]] = {0: [], 1: []}
    everything: dict[int, list[ReadRecord]] = {0: [], 1: []}
    for partition, value in [*values, *uncommitted]:
        record = ReadRecord(partition, len(everything[partition]), value)
        everything[partition].append(record)
        if (partition, value) in values:
            committed[partition].append(record)
    return TxnReads(committed, everything)


def check(run: Run, reads: TxnReads, committed: Mapping[int, int] | None = None
          ) -> dict[str, int]:
    result = check_eos(run.history.ops, EosReads(INPUTS, reads,
                                                 {0: 2, 1: 2} if committed is None
                                                 else committed))
    return {name: n for name, n in result.counts.items() if n}


def clean() -> tuple[Run, TxnReads]:
    run = Run()
    run.txn("L0-0", ["in-0", "in-1"], "ok")
    run.txn("L0-1", ["in-2", "in-3"], "fail")  # aborted, then done again
    run.txn("L0-2", ["in-2", "in-3"], "ok")
    reads = output((0, "in-0@L0-0"), (1, "in-1@L0-0"), (0, "in-2@L0-2"), (1, "in-3@L0-2"))
    return run, reads


def test_a_clean_run_passes() -> None:
    run, reads = clean()
    result = check_eos(run.history.ops, EosReads(INPUTS, reads, {0: 2, 1: 2}))
    assert result.valid, result.summary()
    assert result.stats["inputs"] == 4 and result.stats["outputs-committed"] == 4
    assert result.stats["txn-committed"] == 2 and result.stats["txn-aborted"] == 1


def test_an_input_done_twice_is_a_duplicate() -> None:
    """An unknown transaction that did commit, whose inputs were done again (the loop read
    stale committed offsets): the issue's symptom."""
    run = Run()
    run.txn("L0-0", ["in-0", "in-1"], "pending")  # killed mid-commit: it committed
    run.txn("L1-0", ["in-0", "in-1", "in-2", "in-3"], "ok")
    reads = output((0, "in-0@L0-0"), (1, "in-1@L0-0"), (0, "in-0@L1-0"), (1, "in-1@L1-0"),
                   (0, "in-2@L1-0"), (1, "in-3@L1-0"))
    assert check(run, reads) == {eos_checker.INPUT_DUPLICATED: 2}


def test_an_input_never_done_is_lost_and_its_offset_short() -> None:
    run = Run()
    run.txn("L0-0", ["in-0", "in-1"], "ok")
    reads = output((0, "in-0@L0-0"), (1, "in-1@L0-0"))
    assert check(run, reads, {0: 1, 1: 1}) == {eos_checker.INPUT_LOST: 2,
                                               eos_checker.OFFSETS_MISMATCH: 2}


def test_outputs_out_of_input_order() -> None:
    run = Run()
    run.txn("L0-0", ["in-2", "in-1"], "ok")
    run.txn("L0-1", ["in-0", "in-3"], "ok")
    reads = output((0, "in-2@L0-0"), (1, "in-1@L0-0"), (0, "in-0@L0-1"), (1, "in-3@L0-1"))
    assert check(run, reads) == {eos_checker.INPUT_ORDER: 1}


def test_an_aborted_output_visible_is_the_transactional_checkers_finding() -> None:
    run, _reads = clean()
    reads = output((0, "in-0@L0-0"), (1, "in-1@L0-0"), (0, "in-2@L0-1"), (0, "in-2@L0-2"),
                   (1, "in-3@L0-2"))
    assert check(run, reads) == {ABORTED_VISIBLE: 1, eos_checker.INPUT_DUPLICATED: 1}


def test_committed_offsets_after_a_restart_are_the_last_committed_transactions() -> None:
    run = Run()
    run.txn("L0-0", ["in-0", "in-1"], "ok")
    run.txn("L0-1", ["in-2"], "fail")
    run.restarted({0: 1, 1: 1})
    run.txn("L1-0", ["in-2", "in-3"], "ok")
    reads = output((0, "in-0@L0-0"), (1, "in-1@L0-0"), (0, "in-2@L1-0"), (1, "in-3@L1-0"))
    assert check(run, reads) == {}
    stale = Run()  # offsets of the first transaction only, as before the fix
    stale.txn("L0-0", ["in-0"], "ok")
    stale.txn("L0-1", ["in-1", "in-2"], "ok")
    stale.restarted({0: 1})
    stale.txn("L1-0", ["in-1", "in-3"], "ok")
    reads = output((0, "in-0@L0-0"), (1, "in-1@L0-1"), (0, "in-2@L0-1"), (1, "in-1@L1-0"),
                   (1, "in-3@L1-0"))
    assert check(stale, reads) == {eos_checker.OFFSETS_AFTER_RESTART: 2,
                                   eos_checker.INPUT_DUPLICATED: 1}


def test_a_fresh_member_must_resume_at_the_committed_offsets() -> None:
    run = Run()
    run.txn("L0-0", ["in-0", "in-1"], "ok")
    run.restarted({0: 1, 1: 1})
    run.txn("L1-0", ["in-3"], "ok")  # skipped in-2 (partition 0) and nothing else
    run.txn("L1-1", ["in-2"], "ok")
    reads = output((0, "in-0@L0-0"), (1, "in-1@L0-0"), (1, "in-3@L1-0"), (0, "in-2@L1-1"))
    assert check(run, reads) == {}  # in-2 is done, in order: where each partition resumed
    late = Run()
    late.txn("L0-0", ["in-0", "in-1"], "ok")
    late.restarted({0: 1, 1: 1})
    late.txn("L1-0", ["in-3"], "ok")
    late.txn("L1-1", ["in-0", "in-2"], "ok")  # partition 0 restarted from the beginning
    reads = output((0, "in-0@L0-0"), (1, "in-1@L0-0"), (1, "in-3@L1-0"), (0, "in-0@L1-1"),
                   (0, "in-2@L1-1"))
    found = check(late, reads)
    assert found[eos_checker.RESUMED_ELSEWHERE] == 1 and eos_checker.INPUT_DUPLICATED in found
