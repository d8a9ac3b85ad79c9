"""Coordinator fault schedules on a real 3-broker cluster (issue 9): transactional producers
whose transactions span partitions led by every broker, read_committed / read_uncommitted
readers and a consumer group committing offsets, while the group coordinator, the
transaction coordinator or a data partition's leader is killed -9 or paused mid-commit.
After each: every committed transaction is read back whole, nothing aborted is visible to
read_committed, unknown outcomes are all-or-nothing, no acknowledged offset commit is lost
and the group commits again once the faults are healed.

The default run keeps ``DEFAULT_RUN`` (~45 s); ``pytest -m faults tests/testing/chaos`` runs
every schedule."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.testing.chaos import coordinators
from strom.testing.chaos.coordinators import CoordScheduleConfig, run_coordinator_schedule
from strom.testing.chaos.history import NEMESIS
from strom.testing.chaos.schedule import Fault
from strom.testing.cluster import EmbeddedCluster
from strom.testing.zookeeper import zookeeper_available

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed"),
]

CONFIG = CoordScheduleConfig(seed=5, warmup=2.0, interval=4.0, settle=6.0)

SCHEDULES: dict[str, list[Fault]] = {
    "kill-txn-coordinator": [coordinators.kill_txn_coordinator()],
    "kill-group-coordinator": [coordinators.kill_group_coordinator()],
    "pause-txn-coordinator-mid-commit": [coordinators.pause_txn_coordinator_mid_commit()],
    "kill-data-leader-mid-commit": [coordinators.kill_data_leader_mid_commit()],
    # all four in one run, the mid-commit ones aimed at the other producer
    "combined": [coordinators.kill_txn_coordinator(down=1.0),
                 coordinators.pause_txn_coordinator_mid_commit(producer=1),
                 coordinators.kill_data_leader_mid_commit(producer=1, down=1.0),
                 coordinators.kill_group_coordinator(down=1.0)],
}
#: the combined schedule applies its faults 2 s apart (4 s would pass 60 s)
INTERVALS = {"combined": 2.0}
DEFAULT_RUN = {"kill-txn-coordinator"}


@pytest.mark.parametrize("name", [
    name if name in DEFAULT_RUN else pytest.param(name, marks=pytest.mark.faults_extended)
    for name in sorted(SCHEDULES)])
def test_coordinator_schedule(name: str, tmp_path: Path) -> None:
    with EmbeddedCluster(3, configs=coordinators.CLUSTER_CONFIGS) as cluster:
        run = run_coordinator_schedule(cluster, SCHEDULES[name], CoordScheduleConfig(
            **{**CONFIG.__dict__, "interval": INTERVALS.get(name, CONFIG.interval),
               "history_path": tmp_path / f"{name}.jsonl"}))
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
