"""Fault schedules end to end: workload, faults, final read, replicas from disk, checker.

Today (one broker, RF=1): a broker killed -9 and restarted over and over under idempotent
acks=all producers loses nothing and duplicates nothing; a broker whose acknowledged tail is
cut off while it is down is caught by the checker. RF=3 (issue 9): each RF=3 schedule of
``strom.testing.chaos.catalogue`` (seeded, under 60 s) loses, duplicates and reorders nothing;
with the default 18 s ZooKeeper session a leader stopped (SIGSTOP, 5 s) or whose event loop
stalls (2 s) keeps its leadership and ISR (issue 22); with the ISR down to the leader an
acks=all send is refused NOT_ENOUGH_REPLICAS. The default run keeps the entries marked
``default_run``; ``pytest -m faults tests/testing/chaos`` runs them all
(``bench/fault_report.py`` runs the same catalogue with several seeds and writes the table of
docs/reliability.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.testing.chaos import catalogue, checker, netns
from strom.testing.chaos.history import NEMESIS, History
from strom.testing.zookeeper import zookeeper_available

#: why brokers cannot run in network namespaces here (None: they can)
NO_NETNS = netns.unavailable_reason()

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed"),
]

SINGLE = catalogue.SINGLE


def nemesis_log(history: History) -> list[str]:
    return [op.f for op in history.ops if op.process == NEMESIS]


def test_a_broker_killed_and_restarted_repeatedly_loses_nothing(tmp_path: Path) -> None:
    run = catalogue.run_named(catalogue.SCHEDULES["single-kill-restart"],
                              history_path=tmp_path / "history.jsonl")
    result = run.check
    assert result.valid, result.summary()
    assert nemesis_log(run.history).count("killed") == 4
    assert result.stats["send-ok"] > 500 and result.stats["polled"] > 0
    assert result.stats["read"] == result.stats["send-ok"] + result.stats.get(
        "send-info-present", 0)
    # the replica on disk is the final read, and the history is kept for a post-mortem
    for partition, records in run.reads.items():
        assert run.replicas[partition][0].records == tuple(records)
    assert len(History.read_jsonl(tmp_path / "history.jsonl")) == len(run.history)


def test_an_acknowledged_tail_cut_off_while_the_broker_is_down_is_caught() -> None:
    entry = catalogue.SCHEDULES["single-cut-acked-tail"]
    assert not entry.expect_valid
    run = catalogue.run_named(entry)
    result = run.check
    assert not result.valid
    # the cut is at a batch boundary at or before the 25th record from the end
    assert result.counts[checker.LOST] >= 25, result.summary()
    assert result.counts[checker.READ_VANISHED] >= 1, result.summary()  # the reader saw them
    assert "truncate" in nemesis_log(run.history)


# -- RF=3 schedules (issue 9) ------------------------------------------------------------------

RF3 = catalogue.RF3
RF3_SCHEDULES = [entry for entry in catalogue.SCHEDULES.values()
                 if entry.config is RF3 and not entry.network and entry.name != "too-small-isr"]


@pytest.mark.parametrize("name", [
    entry.name if entry.default_run else pytest.param(
        entry.name, marks=pytest.mark.faults_extended) for entry in RF3_SCHEDULES])
def test_rf3_schedule(name: str, tmp_path: Path) -> None:
    entry = catalogue.SCHEDULES[name]
    run = catalogue.run_named(entry)
    run.history.write_jsonl(tmp_path / f"{name}.jsonl")
    changes = catalogue.state_changes(run)
    # the per-schedule figures (pytest -rP)
    print(f"{name}: {run.check.summary()}; {changes} partition state changes")
    assert run.check.valid, run.check.summary()
    if entry.expect_no_failover:  # a slow broker is not taken for a dead one
        assert changes == 0, [op.value for op in run.history.ops
                              if op.f == "partition-state"]
    assert run.check.stats.get("send-ok", 0) > 500, run.check.summary()  # not vacuous
    # one fault at a time is outlived by the idempotent producer's retries (30 s message
    # timeout): a failed or unknown send means the cluster did not recover (the checker
    # calls that valid — an ISR stuck below min.insync.replicas loses nothing)
    assert run.check.stats.get("send-fail", 0) == 0, run.check.summary()
    assert run.check.stats.get("send-info", 0) == 0, run.check.summary()
    assert run.check.stats["replicas"] == 3 * RF3.partitions


@pytest.mark.faults_extended
@pytest.mark.skipif(NO_NETNS is not None, reason=str(NO_NETNS))
@pytest.mark.parametrize("name", ["isolate-leader", "isolate-leader-and-zookeeper"])
def test_rf3_isolated_leader(name: str) -> None:
    run = catalogue.run_named(catalogue.SCHEDULES[name])
    assert run.check.valid, run.check.summary()
    assert run.check.stats.get("send-ok", 0) > 500, run.check.summary()


def test_rf3_too_small_an_isr_refuses_acks_all() -> None:
    """Both followers down: once the ISR is the leader alone, an acks=all send is answered
    NOT_ENOUGH_REPLICAS (19) on the wire, and nothing is acknowledged below min ISR."""
    run = catalogue.run_named(catalogue.SCHEDULES["too-small-isr"])
    assert catalogue.probe_answers(run) == ("NOT_ENOUGH_REPLICAS",)
    assert catalogue.as_expected(catalogue.SCHEDULES["too-small-isr"], run)
    assert run.check.valid, run.check.summary()
    assert run.check.stats["partition-states"] >= 3
