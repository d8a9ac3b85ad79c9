"""Coordinator fault schedules on a real 3-broker cluster (issue 9): transactional producers
whose transactions span partitions led by every broker, read_committed / read_uncommitted
readers and a consumer group committing offsets, while the group coordinator, the
transaction coordinator or a data partition's leader is killed -9 or paused mid-commit.
After each: every committed transaction is read back whole, nothing aborted is visible to
read_committed, unknown outcomes are all-or-nothing, no acknowledged offset commit is lost
and the group commits again once the faults are healed.

The schedules are ``strom.testing.chaos.catalogue.COORDINATOR_SCHEDULES`` (also run by
``bench/fault_report.py``); the default run keeps those marked ``default_run`` (~45 s);
``pytest -m faults tests/testing/chaos`` runs every schedule."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.testing.chaos import catalogue
from strom.testing.chaos.history import NEMESIS
from strom.testing.zookeeper import zookeeper_available

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed"),
]


@pytest.mark.parametrize("name", [
    entry.name if entry.default_run else pytest.param(
        entry.name, marks=pytest.mark.faults_extended)
    for entry in sorted(catalogue.COORDINATOR_SCHEDULES.values(), key=lambda e: e.name)])
def test_coordinator_schedule(name: str, tmp_path: Path) -> None:
    run = catalogue.run_coordinator_named(catalogue.COORDINATOR_SCHEDULES[name],
                                          history_path=tmp_path / f"{name}.jsonl")
    print(f"{name}: {run.summary()}")  # the per-schedule figures (pytest -rP)
    assert run.valid, run.summary()
    # not vacuous: transactions committed and aborted, markers crossed brokers, the group
    # acknowledged commits, and the fault happened
    stats = run.txn.stats
    assert stats.get("txn-committed", 0) > 50 and stats.get("txn-aborted", 0) > 5, run.summary()
    assert stats["read-uncommitted"] > stats["read-committed"], run.summary()  # aborts wrote
    assert len(set(run.txn_leaders.values())) == 3, run.txn_leaders
    assert run.group.stats.get("commit-ok", 0) > 10, run.summary()
    killed = [op.f for op in run.history.ops if op.process == NEMESIS]
    assert "killed" in killed or "pause" in killed, killed
