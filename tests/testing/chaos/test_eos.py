"""Exactly-once consume-transform-produce on a real 3-broker cluster (issue 22): a
confluent-kafka application (read_committed consumer in a group, transactional producer,
``send_offsets_to_transaction``, 20 inputs a transaction, a tenth aborted on purpose and
rewound) run as a subprocess, while the group coordinator, the transaction coordinator, an
output partition's leader or the application itself is killed -9 after 30 transactions
committed — or, with no fault, the whole cluster is restarted cleanly. Afterwards every input
is in the read_committed output exactly once, nothing aborted or unresolved was ever visible
to read_committed, and the group's committed offsets are the input's end.

Before c162268 (an append of the coordinator's transactional offset commits and markers was
answered as a duplicate and never written) the restart schedule found the committed offsets
unreadable (OffsetFetch waited forever on a transaction without its marker) and the fresh
member processed nothing (2,380 of 3,000 inputs lost, seed 1); the group-coordinator schedule
found 600 inputs duplicated (the new coordinator's committed offsets were the first
transaction's).

The schedules are ``strom.testing.chaos.catalogue.EOS_SCHEDULES`` (also run by
``bench/fault_report.py``); the default run keeps those marked ``default_run`` on one shared
cluster (each schedule names its own topics, group and transactional id); ``pytest -m faults
tests/testing/chaos`` runs every one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.testing.chaos import catalogue, coordinators
from strom.testing.chaos.history import NEMESIS
from strom.testing.cluster import EmbeddedCluster
from strom.testing.zookeeper import zookeeper_available

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed"),
]

#: what each kind of schedule must have done (not vacuous).
FAULT_EVENTS = {"killed", "killed-loop", "cluster-start"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(3, configs=coordinators.CLUSTER_CONFIGS) as started:
        yield started


@pytest.mark.parametrize("name", [
    entry.name if entry.default_run else pytest.param(
        entry.name, marks=pytest.mark.faults_extended)
    for entry in catalogue.EOS_SCHEDULES.values()])
def test_eos_schedule(name: str, cluster: EmbeddedCluster, tmp_path: Path) -> None:
    entry = catalogue.EOS_SCHEDULES[name]
    run = catalogue.run_eos_named(entry, history_path=tmp_path / f"{name}.jsonl",
                                  cluster=cluster)
    print(f"{name}: {run.summary()}")  # the per-schedule figures (pytest -rP)
    assert run.valid, run.summary() + f"; examples: {run.check.anomalies}"
    stats = run.check.stats
    # not vacuous: every input went through, many transactions committed and some aborted
    # (their outputs written, then hidden), the fault struck after 30 commits, outputs were
    # led by all three brokers
    assert stats["inputs"] == entry.inputs == stats["outputs-committed"], run.summary()
    assert stats["txn-committed"] >= entry.inputs // 20 - 5, run.summary()
    assert stats["txn-aborted"] >= 5, run.summary()
    assert stats["read-uncommitted"] > stats["read-committed"], run.summary()
    assert run.committed_at_fault >= 30, run.summary()
    assert len(set(run.output_leaders.values())) == 3, run.output_leaders
    done = {op.f for op in run.history.ops if op.process == NEMESIS}
    assert done & FAULT_EVENTS, done
