"""The transaction checker over planted histories: a clean run passes, and each anomaly class
is found (each test fails if the checker misses what it plants)."""

from __future__ import annotations

from collections.abc import Sequence

from strom.testing.chaos import txn_checker
from strom.testing.chaos.history import History
from strom.testing.chaos.model import ReadRecord
from strom.testing.chaos.txn_checker import TxnReads, check_transactions


class Run:
    def __init__(self) -> None:
        self.history = History()

    def txn(self, name: str, records: Sequence[tuple[int, str]], outcome: str) -> None:
        invoke = self.history.invoke("t0", "txn", {"txn": name,
                                                   "records": [list(r) for r in records]})
        if outcome != "pending":
            self.history.complete(invoke, outcome, {})  # type: ignore[arg-type]

    def poll(self, value: str, partition: int, offset: int,
             isolation: str = "read_committed") -> None:
        self.history.event("r", "ok", "poll", {"value": value, "partition": partition,
                                               "offset": offset, "isolation": isolation})


def reads(*records: tuple[int, int, str]) -> dict[int, list[ReadRecord]]:
    out: dict[int, list[ReadRecord]] = {0: [], 1: []}
    for partition, offset, value in records:
        out[partition].append(ReadRecord(partition, offset, value))
    return out


# offsets: committed txn a (a0 p0@0, a1 p1@0, a2 p0@1), marker at p0@2 / p1@1; aborted b
# (b0 p0@3, b1 p1@2), markers p0@4 / p1@3
A = [(0, "a0"), (1, "a1"), (0, "a2")]
B = [(0, "b0"), (1, "b1")]
UNCOMMITTED = reads((0, 0, "a0"), (0, 1, "a2"), (0, 3, "b0"), (1, 0, "a1"), (1, 2, "b1"))
COMMITTED = reads((0, 0, "a0"), (0, 1, "a2"), (1, 0, "a1"))


def clean_run() -> Run:
    run = Run()
    run.txn("a", A, "ok")
    run.txn("b", B, "fail")
    run.poll("a0", 0, 0)
    run.poll("b0", 0, 3, "read_uncommitted")
    return run


def test_a_clean_run_passes() -> None:
    result = check_transactions(clean_run().history.ops, TxnReads(COMMITTED, UNCOMMITTED))
    assert result.valid, result.summary()
    assert result.stats["txn-committed"] == 1 and result.stats["txn-aborted"] == 1
    assert result.stats["polled"] == 2


def test_a_committed_transaction_missing_a_record_is_lost() -> None:
    committed = reads((0, 0, "a0"), (0, 1, "a2"))
    result = check_transactions(clean_run().history.ops, TxnReads(committed, UNCOMMITTED))
    assert result.counts[txn_checker.COMMITTED_LOST] == 1
    assert result.anomalies[txn_checker.COMMITTED_LOST][0]["missing"] == ["a1"]


def test_an_aborted_record_visible_to_read_committed_is_caught_finally_and_when_polled() -> None:
    run = clean_run()
    run.poll("b1", 1, 2)
    committed = reads((0, 0, "a0"), (0, 1, "a2"), (0, 3, "b0"), (1, 0, "a1"))
    result = check_transactions(run.history.ops, TxnReads(committed, UNCOMMITTED))
    assert result.counts[txn_checker.ABORTED_VISIBLE] == 2, result.summary()


def test_an_unknown_transaction_is_whole_or_absent() -> None:
    for visible, partial in ((COMMITTED, 0), (reads(), 0), (reads((0, 0, "a0")), 1)):
        run = Run()
        run.txn("a", A, "info")
        result = check_transactions(run.history.ops, TxnReads(visible, UNCOMMITTED))
        assert result.counts[txn_checker.UNKNOWN_PARTIAL] == partial, result.summary()
        assert result.counts[txn_checker.COMMITTED_LOST] == 0


def test_an_unknown_transaction_seen_then_gone_is_caught() -> None:
    run = Run()
    run.txn("a", A, "pending")  # never completed: unknown
    run.poll("a0", 0, 0)
    result = check_transactions(run.history.ops, TxnReads(reads(), UNCOMMITTED))
    assert result.counts[txn_checker.UNKNOWN_SEEN_THEN_ABORTED] == 1, result.summary()


def test_records_out_of_produce_order_within_a_partition() -> None:
    swapped = reads((0, 0, "a2"), (0, 1, "a0"), (1, 0, "a1"))
    result = check_transactions(clean_run().history.ops, TxnReads(swapped, swapped))
    assert result.counts[txn_checker.TXN_ORDER] >= 1, result.summary()


def test_duplicates_unexpected_values_and_disagreeing_reads() -> None:
    run = clean_run()
    committed = reads((0, 0, "a0"), (0, 1, "a2"), (1, 0, "a1"), (1, 1, "a1"), (1, 4, "zz"))
    uncommitted = reads((0, 0, "a0"), (0, 1, "a2"), (1, 0, "a1"), (1, 1, "a1"))
    result = check_transactions(run.history.ops, TxnReads(committed, uncommitted))
    assert result.counts[txn_checker.DUPLICATED] == 2  # in both reads
    assert result.counts[txn_checker.UNEXPECTED] == 1
    assert result.counts[txn_checker.READ_MISMATCH] >= 1  # zz at p1@4 only read_committed


def test_a_stuck_last_stable_offset_is_reported() -> None:
    result = check_transactions(clean_run().history.ops,
                                TxnReads(COMMITTED, UNCOMMITTED, stuck=[1]))
    assert result.counts[txn_checker.LSO_STUCK] == 1
