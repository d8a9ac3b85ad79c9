"""The named real-process fault schedules: what ``tests/testing/chaos/test_schedule.py`` runs
and what ``bench/fault_report.py`` reports (``docs/reliability.md``), kept in one place so
the two cannot drift apart.

    entry = SCHEDULES["kill-leader"]
    result = run_named(entry, seed=9)          # a fresh EmbeddedCluster, run, check
    assert result.check.valid == entry.expect_valid

Each :class:`NamedSchedule` says how many brokers it needs, whether it needs network
namespaces (root and iproute2: ``netns.unavailable_reason()`` is None), its faults (built
fresh per run: a fault may keep state), its :class:`ScheduleConfig` (the seed is given per
run) and what the checker must say: ``expect_valid`` False marks a schedule that loses
acknowledged writes on purpose (a single broker whose acknowledged tail is cut off), where an
anomaly found is the checker doing its job; ``expect_probes``, the wire answers its probe sends
must get; ``expect_no_failover``, that no partition state changed at all (no leader moved, no
ISR shrank: a slow broker was not taken for a dead one) — :func:`as_expected` judges all three.
``cluster_configs`` are broker settings over the fixture's: :data:`DEFAULT_SESSION` gives the
brokers the default 18 s ZooKeeper session instead of the fixture's 2 s, so that only what the
brokers see for themselves can move leadership fast. ``default_run`` marks the subset a plain
``pytest`` run keeps (the others need ``-m faults``).

:data:`COORDINATOR_SCHEDULES` names the coordinator schedules
(:mod:`~strom.testing.chaos.coordinators`: transactions and a consumer group under faults
aimed at their coordinators; ``tests/testing/chaos/test_coordinators.py``);
:func:`run_coordinator_named` runs one on a fresh cluster.

:data:`EOS_SCHEDULES` names the exactly-once schedules (:mod:`~strom.testing.chaos.eos`: a
consume-transform-produce application under faults aimed at its group coordinator, its
transaction coordinator, an output leader, itself, or a clean restart of the cluster;
``tests/testing/chaos/test_eos.py``); :func:`run_eos_named` runs one on a fresh cluster or
on a given one (its topics, group and transactional id are named after the schedule, so
several share a cluster).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from strom.common.config import BROKER_KEYS
from strom.testing.chaos import coordinators, eos, schedule
from strom.testing.chaos.cluster import Cluster
from strom.testing.chaos.coordinators import CoordScheduleConfig, CoordScheduleResult
from strom.testing.chaos.eos import EosConfig, EosFault, EosResult
from strom.testing.chaos.nemesis import Nemesis
from strom.testing.chaos.schedule import Fault, ScheduleConfig, ScheduleResult, run_schedule
from strom.testing.chaos.workload import probe_send
from strom.testing.cluster import EmbeddedCluster

#: One broker, RF=1: fast faults, short phases.
SINGLE = ScheduleConfig(partitions=2, replication_factor=1, min_insync_replicas=1,
                        warmup=1.5, interval=1.5, settle=1.0)
#: RF=3, min.insync.replicas=2, idempotent acks=all producers (the issue's setting).
RF3 = ScheduleConfig(partitions=3, replication_factor=3, min_insync_replicas=2,
                     warmup=2.0, interval=4.0, settle=6.0, seed=9)

#: The broker default ZooKeeper session (18 s), over EmbeddedCluster's 2 s.
DEFAULT_SESSION: dict[str, object] = {
    "zookeeper.session.timeout.ms": BROKER_KEYS["zookeeper.session.timeout.ms"].default}

#: The history event a probe records: ``{"answer": error name or None}``.
PROBE = "probe-send"


@dataclass(frozen=True)
class NamedSchedule:
    name: str
    doc: str
    faults: Callable[[], list[Fault]]
    config: ScheduleConfig = RF3
    brokers: int = 3
    network: bool = False
    expect_valid: bool = True
    default_run: bool = False
    #: the answers the schedule's probe sends must get (:data:`PROBE` events), if it probes.
    expect_probes: tuple[str | None, ...] = ()
    #: no partition state may change (leader, epoch, ISR) during the run.
    expect_no_failover: bool = False
    #: broker settings over the EmbeddedCluster's own.
    cluster_configs: dict[str, object] = dataclasses.field(default_factory=dict)


#: Probes sent at most while the leader has not yet applied the shrunk ISR.
_PROBES = 5


def two_followers_down() -> Fault:
    """kill -9 both followers of partition 0, wait for the ISR to shrink to the leader, then
    probe one acks=all send; its answer (NOT_ENOUGH_REPLICAS expected) is recorded as a
    :data:`PROBE` event.

    The controller writes the shrunk ISR to ZooKeeper before the leader applies it: a probe in
    between is appended and then answered NOT_ENOUGH_REPLICAS_AFTER_APPEND (as Kafka answers a
    produce parked while the ISR shrinks), so the probe is sent again, up to :data:`_PROBES`
    times; the earlier answers go into the event as ``before``. Each probe is a send in the
    history (a unique value), so the checker holds it to its answer: a refused probe must never
    be read, an appended one may be."""
    def apply(nemesis: Nemesis) -> None:
        config = RF3
        leader = nemesis.leader(config.topic, 0)
        for node in sorted(set(nemesis.cluster.brokers) - {leader}):
            nemesis.kill(node)
        nemesis.view.wait_for("the ISR to shrink to the leader", lambda: (
            nemesis.view.partition_state(config.topic, 0) or {}).get("isr") == [leader], 30)
        before: list[str | None] = []
        while True:
            answer = probe_send(nemesis.cluster.bootstrap, config.topic, 0,
                                history=nemesis.history, value=f"probe-{len(before)}")
            if answer != "NOT_ENOUGH_REPLICAS_AFTER_APPEND" or len(before) + 1 >= _PROBES:
                break
            before.append(answer)
        nemesis.history.nemesis(PROBE, {"answer": answer, "before": before})
    return Fault("two-followers-down", apply)


def _entries(*entries: NamedSchedule) -> dict[str, NamedSchedule]:
    return {entry.name: entry for entry in entries}


SCHEDULES: dict[str, NamedSchedule] = _entries(
    NamedSchedule("single-kill-restart", "one broker (RF=1) killed -9 and restarted 4 times",
                  lambda: [schedule.kill_restart(0, down=0.3) for _ in range(4)],
                  SINGLE, brokers=1, default_run=True),
    NamedSchedule("single-cut-acked-tail",
                  "one broker loses its last 25 acknowledged records while down: the checker "
                  "must report them lost",
                  lambda: [schedule.cut_log_tail(0, SINGLE.topic, 0, records=25)],
                  SINGLE, brokers=1, expect_valid=False, default_run=True),
    NamedSchedule("kill-leader", "kill -9 the leader of partition 0, then of partition 1 "
                  "(3 s down each)",
                  lambda: [schedule.kill_leader(), schedule.kill_leader(partition=1)],
                  default_run=True),
    NamedSchedule("pause-leader", "SIGSTOP the leader for 5 s (session lost), then SIGCONT: "
                  "a zombie leader", lambda: [schedule.pause_leader(paused=5.0)],
                  default_run=True),
    NamedSchedule("kill-controller", "kill -9 the controller twice (3 s down each)",
                  lambda: [schedule.kill_controller(), schedule.kill_controller()]),
    NamedSchedule("expire-leader-session", "expire the leader's ZooKeeper session",
                  lambda: [schedule.expire_leader_session()]),
    NamedSchedule("rolling-restart", "restart every broker in turn (SIGTERM, controlled "
                  "shutdown)", lambda: [schedule.rolling_restart()]),
    NamedSchedule("truncated-follower", "a follower restarts with its last 30 records cut",
                  lambda: [schedule.truncate_follower(records=30)]),
    NamedSchedule("too-small-isr", "both followers of partition 0 killed: acks=all answered "
                  "NOT_ENOUGH_REPLICAS once the ISR is the leader alone",
                  lambda: [two_followers_down()], default_run=True,
                  expect_probes=("NOT_ENOUGH_REPLICAS",)),
    NamedSchedule("kill-leader-default-session",
                  "kill -9 the leader of partition 0, then of partition 1 (3 s down each), "
                  "brokers with the default 18 s ZooKeeper session",
                  lambda: [schedule.kill_leader(), schedule.kill_leader(partition=1)],
                  cluster_configs=DEFAULT_SESSION),
    NamedSchedule("pause-leader-default-session",
                  "SIGSTOP the leader for 5 s with the default 18 s session: a slow broker, "
                  "no failover", lambda: [schedule.pause_leader(paused=5.0)],
                  cluster_configs=DEFAULT_SESSION, expect_no_failover=True, default_run=True),
    NamedSchedule("stall-leader", "block the leader's event loop for 2 s, twice (default "
                  "session): a slow broker, no failover",
                  lambda: [schedule.stall_leader(), schedule.stall_leader()],
                  cluster_configs=DEFAULT_SESSION, expect_no_failover=True, default_run=True),
    NamedSchedule("isolate-leader", "cut the leader off from the other brokers for 6 s "
                  "(network namespaces)", lambda: [schedule.isolate_leader()], network=True),
    NamedSchedule("isolate-leader-and-zookeeper", "cut the leader off from the brokers and "
                  "ZooKeeper for 6 s", lambda: [schedule.isolate_leader(zookeeper=True)],
                  network=True),
)


def run_named(entry: NamedSchedule, seed: int | None = None,
              history_path: Path | None = None) -> ScheduleResult:
    """Run ``entry`` on a fresh :class:`EmbeddedCluster` (closed afterwards) with ``seed``
    (None: the entry's own) and return what :func:`run_schedule` returns."""
    config = entry.config
    if seed is not None:
        config = dataclasses.replace(config, seed=seed)
    if history_path is not None:
        config = dataclasses.replace(config, history_path=history_path)
    with EmbeddedCluster(entry.brokers, network=entry.network,
                         configs=entry.cluster_configs) as cluster:
        return run_schedule(cluster, entry.faults(), config)


def probe_answers(result: ScheduleResult) -> tuple[object, ...]:
    """The answers :func:`two_followers_down` recorded, in order."""
    return tuple(op.value.get("answer") for op in result.history.ops if op.f == PROBE)


def state_changes(result: ScheduleResult) -> int:
    """How many times a partition's state (leader, leader epoch, ISR) changed after it was
    first observed: leader elections and ISR shrinks or expansions."""
    seen: dict[object, tuple[object, object, object]] = {}
    changes = 0
    for op in result.history.ops:
        if op.f != "partition-state":
            continue
        state = (op.value.get("leader"), op.value.get("leader_epoch"),
                 tuple(op.value.get("isr") or ()))
        partition = op.value.get("partition")
        if partition in seen and seen[partition] != state:
            changes += 1
        seen[partition] = state
    return changes


def as_expected(entry: NamedSchedule, result: ScheduleResult) -> bool:
    """The checker's verdict is the one ``entry`` expects, its probes got the answers it
    expects, and no partition state changed if it expects no failover."""
    return (result.check.valid == entry.expect_valid
            and probe_answers(result) == entry.expect_probes
            and not (entry.expect_no_failover and state_changes(result)))


#: The coordinator schedules' shared settings (seed 5 unless given per run).
COORDINATOR_CONFIG = CoordScheduleConfig(seed=5, warmup=2.0, interval=4.0, settle=6.0)


@dataclass(frozen=True)
class NamedCoordinatorSchedule:
    name: str
    doc: str
    faults: Callable[[], list[Fault]]
    #: seconds between faults (the combined schedule's four faults 2 s apart stay under 60 s)
    interval: float = COORDINATOR_CONFIG.interval
    default_run: bool = False
    group_protocol: str = "classic"


COORDINATOR_SCHEDULES: dict[str, NamedCoordinatorSchedule] = {entry.name: entry for entry in (
    NamedCoordinatorSchedule("kill-txn-coordinator", "kill -9 the transaction coordinator",
                             lambda: [coordinators.kill_txn_coordinator()], default_run=True),
    NamedCoordinatorSchedule("kill-group-coordinator", "kill -9 the group coordinator",
                             lambda: [coordinators.kill_group_coordinator()]),
    NamedCoordinatorSchedule("kill-consumer-group-coordinator",
                             "kill -9 the coordinator of a KIP-848 (group.protocol=consumer) "
                             "group", lambda: [coordinators.kill_group_coordinator()],
                             default_run=True, group_protocol="consumer"),
    NamedCoordinatorSchedule("pause-txn-coordinator-mid-commit",
                             "SIGSTOP the transaction coordinator 5 s as a commit starts",
                             lambda: [coordinators.pause_txn_coordinator_mid_commit()]),
    NamedCoordinatorSchedule("kill-data-leader-mid-commit",
                             "kill -9 a data partition's leader as a commit starts",
                             lambda: [coordinators.kill_data_leader_mid_commit()]),
    # all four in one run, the mid-commit ones aimed at the other producer
    NamedCoordinatorSchedule("combined", "all four, 2 s apart", lambda: [
        coordinators.kill_txn_coordinator(down=1.0),
        coordinators.pause_txn_coordinator_mid_commit(producer=1),
        coordinators.kill_data_leader_mid_commit(producer=1, down=1.0),
        coordinators.kill_group_coordinator(down=1.0)], interval=2.0),
)}


def run_coordinator_named(entry: NamedCoordinatorSchedule, seed: int | None = None,
                          history_path: Path | None = None) -> CoordScheduleResult:
    """Run ``entry`` on a fresh :class:`EmbeddedCluster` with few internal partitions
    (``coordinators.CLUSTER_CONFIGS``), closed afterwards."""
    config = dataclasses.replace(COORDINATOR_CONFIG, interval=entry.interval,
                                 history_path=history_path,
                                 group_protocol=entry.group_protocol)
    if seed is not None:
        config = dataclasses.replace(config, seed=seed)
    with EmbeddedCluster(3, configs=coordinators.CLUSTER_CONFIGS) as cluster:
        return coordinators.run_coordinator_schedule(cluster, entry.faults(), config)


# -- exactly-once consume-transform-produce ------------------------------------------------

@dataclass(frozen=True)
class NamedEosSchedule:
    name: str
    doc: str
    #: the faults, given the run's config (its group, transactional id and topics).
    faults: Callable[[EosConfig], list[EosFault]]
    default_run: bool = False
    inputs: int = 3000
    group_protocol: str = "classic"


def eos_config(entry: NamedEosSchedule, seed: int = 1,
               history_path: Path | None = None) -> EosConfig:
    """The entry's config: topics, group and transactional id named after it."""
    name = entry.name
    return EosConfig(input_topic=f"in-{name}", output_topic=f"out-{name}", group=f"g-{name}",
                     transactional_id=f"t-{name}", inputs=entry.inputs, seed=seed,
                     history_path=history_path, group_protocol=entry.group_protocol)


def _group(config: EosConfig) -> EosFault:
    return eos.kill_group_coordinator(config.group)


def _txn(config: EosConfig) -> EosFault:
    return eos.kill_txn_coordinator(config.transactional_id)


def _output(config: EosConfig) -> EosFault:
    return eos.kill_output_leader(config.output_topic, config.group, config.transactional_id)


EOS_SCHEDULES: dict[str, NamedEosSchedule] = {entry.name: entry for entry in (
    NamedEosSchedule("eos-restart-cluster", "no fault: after 30 transactions the application "
                     "and every broker stop cleanly and start again; committed offsets read "
                     "back, a fresh group member resumes", lambda c: [eos.restart_cluster()],
                     default_run=True),
    NamedEosSchedule("eos-kill-group-coordinator", "kill -9 the leader of the group's "
                     "__consumer_offsets partition (3 s down)", lambda c: [_group(c)],
                     default_run=True),
    NamedEosSchedule("eos-kill-txn-coordinator", "kill -9 the leader of the transactional "
                     "id's __transaction_state partition (3 s down)", lambda c: [_txn(c)],
                     default_run=True),
    NamedEosSchedule("eos-kill-output-leader", "kill -9 the leader of an output partition "
                     "that leads neither coordinator (3 s down)", lambda c: [_output(c)]),
    NamedEosSchedule("eos-kill-loop", "kill -9 the application as it commits, and again as "
                     "it produces; a new incarnation takes over",
                     lambda c: [eos.kill_loop("committing"), eos.kill_loop("txn")],
                     default_run=True),
    NamedEosSchedule("eos-kip848-kill-group-coordinator", "the application's consumer speaks "
                     "KIP-848 (group.protocol=consumer): kill -9 its group coordinator (3 s "
                     "down)", lambda c: [_group(c)], default_run=True,
                     group_protocol="consumer"),
    NamedEosSchedule("eos-kip848-kill-loop", "the application's consumer speaks KIP-848: "
                     "kill -9 it as it commits, and again as it produces; a new incarnation "
                     "(a new dynamic member) takes over once the dead one's session expires",
                     lambda c: [eos.kill_loop("committing"), eos.kill_loop("txn")],
                     group_protocol="consumer"),
    NamedEosSchedule("eos-combined", "all four kills, 2 s apart: group coordinator, "
                     "transaction coordinator, output leader, application", lambda c: [
                         _group(c), _txn(c), _output(c), eos.kill_loop("committing")],
                     inputs=4000),
)}


def run_eos_named(entry: NamedEosSchedule, seed: int = 1, history_path: Path | None = None,
                  cluster: Cluster | None = None) -> EosResult:
    """Run ``entry`` on ``cluster``, or on a fresh 3-broker :class:`EmbeddedCluster` with
    few internal partitions (closed afterwards)."""
    config = eos_config(entry, seed, history_path)
    if cluster is not None:
        return eos.run_eos_schedule(cluster, entry.faults(config), config)
    with EmbeddedCluster(3, configs=coordinators.CLUSTER_CONFIGS) as fresh:
        return eos.run_eos_schedule(fresh, entry.faults(config), config)
