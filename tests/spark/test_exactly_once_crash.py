"""kill -9 of a streaming strom → strom query with the exactlyOnce sink (driver, JVM and
Python workers: the whole process group) at seeded random points, restarted from its
checkpoint each time — and, in three of the runs, kill -9 of the broker that coordinates an
open sink transaction; the output read with read_committed holds every input record exactly
once, in per-key order.

The query runs against a 3-broker cluster (topics RF 3). Each of the 8 runs gets new input,
waits until the restarted query's sink has a transaction open (Spark's restart takes ~25 s on
a loaded 2-core machine; killing before the sink runs would test little), then is killed at
once or up to 1.5 s later: inside a task's transaction, between a task's commit and Spark's
commit log, or a few micro-batches on. In runs 3, 5 and 7 the broker leading the open
transaction's ``__consumer_offsets`` partition (its task's batch-id group: the sink's
exactly-once record), or in run 5 its ``__transaction_state`` partition, is killed -9 first,
the moment the transaction is seen; it is started again while the next run's Spark starts.
Before c162268 a task's transactional offset commits reached ``__consumer_offsets`` without
their markers (an append of the coordinator's answered as a duplicate), so once that
partition's leader moved the batch ids were pending for good: on c162268^ (seed 387204) the
final run failed, its task reading its batch id with UNSTABLE_OFFSET_COMMIT after broker 2,
leading that group's partition, had been killed in run 7. A final run drains the input
(availableNow). Set STROM_EOS_SEED to repeat a schedule.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

from strom.client.sync import SyncAdminClient
from strom.testing.chaos.coordinators import GROUP_TOPIC_INTERNAL, TXN_TOPIC_INTERNAL, coordinator
from strom.testing.chaos.history import History
from strom.testing.chaos.nemesis import Nemesis
from strom.testing.cluster import EmbeddedCluster
from strom.testing.zookeeper import zookeeper_available
from tests.client.txn_helpers import needs_aborted_filtering
from tests.spark.eos_helpers import new_topic, produce_keyed, read_committed

JOB = Path(__file__).with_name("eos_job.py")
SRC = Path(__file__).parents[2] / "src"
KILLS = 8
RECORDS_PER_RUN = 120
KEYS = 12
MAX_KILL_DELAY_S = 1.5
#: run → the internal topic whose partition leader (for the open transaction) is killed too
BROKER_KILLS = {2: GROUP_TOPIC_INTERNAL, 4: TXN_TOPIC_INTERNAL, 6: GROUP_TOPIC_INTERNAL}
CLUSTER_CONFIGS = {"offsets.topic.num.partitions": 3, "transaction.state.log.num.partitions": 3,
                   "group.initial.rebalance.delay.ms": 0}


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    if not zookeeper_available():
        pytest.skip("ZooKeeper is not installed")
    with EmbeddedCluster(3, configs=CLUSTER_CONFIGS) as started:
        yield started


def _latest(directory: Path) -> int:
    ids = [int(f.name) for f in directory.glob("[0-9]*")] if directory.exists() else []
    return max(ids, default=-1)


def _wait_for_writing(job: subprocess.Popen[bytes], started: Path, bootstrap: str
                      ) -> list[str]:
    """Return the open sink transactions once the restarted query's sink has one (a Spark
    restart takes most of the time; killing before the sink runs would test little), or
    nothing after a minute."""
    deadline = time.monotonic() + 180
    while not started.exists():
        assert job.poll() is None, f"the job ended early: {job.stderr.read()!r}"
        assert time.monotonic() < deadline, "the query never started"
        time.sleep(0.05)
    prefix = f"strom-spark-{started.read_text().strip()}-"
    deadline = time.monotonic() + 60
    with SyncAdminClient(bootstrap) as admin:
        while time.monotonic() < deadline and job.poll() is None:
            found = [t.transactional_id for t in admin.list_transactions(["Ongoing"])
                     if t.transactional_id.startswith(prefix)]
            if found:
                return found
            time.sleep(0.02)
    return []


def _start(args: list[str], started: Path) -> subprocess.Popen[bytes]:
    started.unlink(missing_ok=True)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(SRC), str(SRC.parent),
                                          os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, str(JOB), *args], env=env,
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def _kill_coordinator(nemesis: Nemesis, internal_topic: str, open_txns: list[str]
                      ) -> tuple[int, threading.Thread] | None:
    """kill -9 the broker leading ``internal_topic``'s partition of the first open
    transaction's id (its task's group has the same name); a thread starts it again."""
    if not open_txns:
        return None
    node = nemesis.kill(coordinator(nemesis, internal_topic, open_txns[0]))
    restart = threading.Thread(target=nemesis.start, args=(node,), daemon=True)
    return node, restart


@needs_aborted_filtering
@pytest.mark.timeout(1500)  # 9 Spark start-ups: minutes on a loaded 2-core machine
def test_killed_query_writes_every_record_exactly_once_in_key_order(
        cluster: EmbeddedCluster, tmp_path: Path) -> None:
    seed = int(os.environ.get("STROM_EOS_SEED", time.time_ns() % 1_000_000))
    print(f"exactly-once crash test seed: {seed} (set STROM_EOS_SEED to repeat)")
    rng = random.Random(seed)
    began = time.monotonic()
    bootstrap = cluster.bootstrap
    source = new_topic(bootstrap, 3, "eos-in", replication_factor=3)
    sink = new_topic(bootstrap, 2, "eos-out", replication_factor=3)
    checkpoint, started = tmp_path / "cp", tmp_path / "started"
    args = [bootstrap, source, sink, str(checkpoint), str(started)]
    nemesis = Nemesis(cluster, History(), seed=seed)
    pending: threading.Thread | None = None  # the restart of the broker killed last run
    sent: list[tuple[str, str]] = []
    mid_batch = brokers_killed = 0
    try:
        for kill in range(KILLS):
            sent += produce_keyed(bootstrap, source, RECORDS_PER_RUN, KEYS, start=len(sent))
            job = _start(args, started)
            restarting, pending = pending, None
            if restarting is not None:  # it comes back while Spark starts
                restarting.start()
            try:
                open_txns = _wait_for_writing(job, started, bootstrap)
                if kill in BROKER_KILLS:
                    killed = _kill_coordinator(nemesis, BROKER_KILLS[kill], open_txns)
                    if killed is not None:
                        brokers_killed += 1
                        print(f"kill {kill + 1}: broker {killed[0]} ({BROKER_KILLS[kill]} "
                              f"of {open_txns[0]})")
                        pending = killed[1]
                # Anywhere from inside that transaction to a few micro-batches later.
                time.sleep(rng.choice([0.0, rng.uniform(0.0, MAX_KILL_DELAY_S)]))
            finally:
                with contextlib.suppress(ProcessLookupError):  # it may have failed already
                    os.killpg(job.pid, signal.SIGKILL)
                job.wait()
                if restarting is not None:
                    restarting.join(120)
            planned, done = _latest(checkpoint / "offsets"), _latest(checkpoint / "commits")
            mid_batch += planned > done
            print(f"kill {kill + 1}: planned batch {planned}, committed {done} "
                  f"({time.monotonic() - began:.0f} s)")
        if pending is not None:
            pending.start()
            pending.join(120)
        cluster.wait_for_brokers(len(cluster.brokers), 60)

        job = _start([*args, "final"], started)
        _, err = job.communicate(timeout=300)
        assert job.returncode == 0, err.decode(errors="replace")[-3000:]
    finally:
        nemesis.close()
    # Kills landed between planning a batch and Spark's commit of it (replays happened), and
    # coordinators' brokers died under open transactions.
    assert mid_batch >= 1
    assert brokers_killed >= 2, brokers_killed

    out = read_committed(bootstrap, sink)
    per_key: dict[str, list[str]] = {}
    for rows in out.values():
        for key, value in rows:
            assert key is not None
            per_key.setdefault(key, []).append(value)
    expected: dict[str, list[str]] = {}
    for key, value in sent:
        expected.setdefault(key, []).append(value)
    assert sum(len(v) for v in per_key.values()) == len(sent)
    assert per_key == expected  # each record once, in the order it was sent per key
