"""Exactly-once consume-transform-produce under faults (issue 22): the schedule runner and
its faults.

:func:`run_eos_schedule` on a cluster (3 brokers: the output partitions' leaders spread over
them):

1. creates the input topic (``input_partitions``) and the output topic
   (``output_partitions``), RF 3 with ``min.insync.replicas`` 2, and fills the input with
   ``inputs`` unique values (:func:`~strom.testing.chaos.eos_workload.fill_inputs`);
2. starts a read_committed reader of the output (every record it sees is a ``poll`` event)
   and the application (:class:`~strom.testing.chaos.eos_workload.LoopSupervisor`: the
   consume-transform-produce loop as a subprocess, 20 inputs a transaction, a seeded tenth
   aborted on purpose);
3. once ``fault_after`` transactions committed, applies the faults one after another
   (``interval`` seconds apart), then heals (killed brokers started again, a killed
   application replaced);
4. waits until the group's committed offsets reach the end of every input partition (the
   input drained; ``drain_timeout``), stops the application (SIGTERM) and the reader;
5. reads the input and the output back (the output at both isolation levels) and the group's
   committed offsets, and runs :func:`~strom.testing.chaos.eos_checker.check_eos`.

A fault (:class:`EosFault`) is a name and a function of the :class:`Nemesis` and the
supervisor; its target is found when it runs: the group coordinator is the leader of the
group's ``__consumer_offsets`` partition, the transaction coordinator the leader of the
transactional id's ``__transaction_state`` partition (both read from ZooKeeper), an output
partition's leader one that leads neither. Faults aimed at the application wait for its next
``committing`` event (or a transaction's start) and strike at once. :func:`restart_cluster`
is the no-fault case: the application stops, every broker is stopped cleanly and started
again, the group's committed offsets are read back (a ``committed-after-restart`` event, which
the checker holds to the last committed transaction) and a fresh group member resumes.

The cluster should use few internal partitions
(:data:`~strom.testing.chaos.coordinators.CLUSTER_CONFIGS`). ``config.seed`` fixes the
application's aborts and the nemesis's choices; timing depends on the machine.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaException

from strom.testing.chaos.checker import CheckResult
from strom.testing.chaos.cluster import Cluster
from strom.testing.chaos.coordinators import GROUP_TOPIC_INTERNAL, TXN_TOPIC_INTERNAL, coordinator
from strom.testing.chaos.eos_checker import COMMITTED_AFTER_RESTART, EosReads, check_eos
from strom.testing.chaos.eos_workload import (
    LoopSettings,
    LoopSupervisor,
    fill_inputs,
    group_offsets,
    input_ends,
    wait_drained,
)
from strom.testing.chaos.history import NEMESIS, History
from strom.testing.chaos.nemesis import Nemesis
from strom.testing.chaos.txn_checker import TxnReads
from strom.testing.chaos.txn_workload import read_committed_all
from strom.testing.chaos.workload import ReaderWorker, create_topic, read_all


@dataclass(frozen=True)
class EosFault:
    name: str
    apply: Callable[[Nemesis, LoopSupervisor], None]


@dataclass(frozen=True)
class EosConfig:
    input_topic: str = "eos-in"
    output_topic: str = "eos-out"
    group: str = "eos-group"
    transactional_id: str = "eos-loop"
    input_partitions: int = 4
    output_partitions: int = 3
    replication_factor: int = 3
    min_insync_replicas: int = 2
    inputs: int = 3000
    batch: int = 20
    abort_ratio: float = 0.1
    #: committed transactions before the first fault.
    fault_after: int = 30
    interval: float = 2.0
    drain_timeout: float = 120.0
    seed: int = 0
    history_path: Path | None = None
    #: where each incarnation's stderr goes (a temporary directory if None).
    log_dir: Path | None = None
    #: the application's consumer ``group.protocol`` (``consumer``: KIP-848)
    group_protocol: str = "classic"


@dataclass
class EosResult:
    history: History
    check: CheckResult
    committed: dict[int, int]
    seconds: float
    #: committed transactions when the first fault struck.
    committed_at_fault: int = -1
    output_leaders: dict[int, int] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return self.check.valid

    def summary(self) -> str:
        return f"{self.check.summary()} | first fault after {self.committed_at_fault} " \
               f"committed | {self.seconds:.1f} s"


def run_eos_schedule(cluster: Cluster, faults: Sequence[EosFault],
                     config: EosConfig | None = None) -> EosResult:
    """Run the schedule (module docstring); the history goes to ``config.history_path`` (if
    set) whatever happens."""
    config = config or EosConfig()
    history = History()
    try:
        if config.log_dir is not None:
            return _run(cluster, faults, config, history, config.log_dir)
        with tempfile.TemporaryDirectory(prefix="strom-eos-") as logs:
            return _run(cluster, faults, config, history, Path(logs))
    finally:
        if config.history_path is not None:
            history.write_jsonl(config.history_path)


def committed_transactions(history: History) -> int:
    return sum(1 for op in history.ops if op.f == "txn" and op.type == "ok")


def _run(cluster: Cluster, faults: Sequence[EosFault], config: EosConfig, history: History,
         log_dir: Path) -> EosResult:
    started = time.monotonic()
    topic_configs = {"min.insync.replicas": str(config.min_insync_replicas)}
    create_topic(cluster.bootstrap, config.input_topic, config.input_partitions,
                 config.replication_factor, topic_configs)
    create_topic(cluster.bootstrap, config.output_topic, config.output_partitions,
                 config.replication_factor, topic_configs)
    nemesis = Nemesis(cluster, history, seed=config.seed)
    outputs = range(config.output_partitions)
    leaders = {p: nemesis.leader(config.output_topic, p) for p in outputs}
    history.nemesis("output-leaders", {"leaders": leaders})
    fill_inputs(cluster.bootstrap, config.input_topic, config.input_partitions, config.inputs)
    history.nemesis("filled", {"inputs": config.inputs})
    settings = LoopSettings(cluster.bootstrap, config.input_topic, config.output_topic,
                            config.group, config.transactional_id, config.output_partitions,
                            batch=config.batch, abort_ratio=config.abort_ratio,
                            seed=config.seed, group_protocol=config.group_protocol,
                            # a KIP-848 static member restarted before its session expired
                            # is refused for good (UNRELEASED_INSTANCE_ID, fatal to clients,
                            # as on Kafka): incarnations join as new dynamic members
                            **({"instance_id": ""} if config.group_protocol == "consumer"
                               else {}))
    supervisor = LoopSupervisor(settings, history, log_dir)
    reader = ReaderWorker("r-committed", cluster.bootstrap, config.output_topic, outputs,
                          history, {"isolation.level": "read_committed"}).start()
    at_fault = -1
    try:
        supervisor.start()
        _await_commits(history, supervisor, config.fault_after)
        at_fault = committed_transactions(history)
        try:
            for fault in faults:
                history.nemesis("fault", {"name": fault.name,
                                          "committed": committed_transactions(history)})
                fault.apply(nemesis, supervisor)
                time.sleep(config.interval)
        finally:
            nemesis.heal_all()
        ends = input_ends(cluster.bootstrap, config.input_topic, range(config.input_partitions))
        drained = wait_drained(supervisor, ends, config.drain_timeout)
        history.nemesis("drained", {"ends": ends, "committed": drained})
    finally:
        supervisor.stop()
        reader.stop()
        nemesis.close()
    inputs = read_all(cluster.bootstrap, config.input_topic, range(config.input_partitions))
    committed, uncommitted, stuck = read_committed_all(cluster.bootstrap, config.output_topic,
                                                       outputs)
    try:
        offsets = group_offsets(cluster.bootstrap, config.group, config.input_topic,
                                range(config.input_partitions))
        history.nemesis("final-offsets", {"offsets": offsets})
    except KafkaException as exc:  # none readable: every partition is a mismatch
        offsets = {}
        history.nemesis("final-offsets", {"offsets": offsets, "error": str(exc)})
    check = check_eos(history.ops, EosReads(inputs, TxnReads(committed, uncommitted, stuck),
                                            offsets))
    history.nemesis("checked", {"valid": check.valid, "counts": check.counts})
    return EosResult(history, check, offsets, time.monotonic() - started, at_fault, leaders)


def _await_commits(history: History, supervisor: LoopSupervisor, count: int,
                   timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while committed_transactions(history) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {committed_transactions(history)} of {count} "
                               f"transactions committed within {timeout} s")
        supervisor.ensure_running()
        time.sleep(0.1)


def _wait_for(supervisor: LoopSupervisor, f: str, timeout: float = 120.0) -> None:
    """Block until the running incarnation records an ``f`` operation newer than this call,
    keeping one running (an incarnation may end on its own meanwhile: a stuck client call)."""
    history = supervisor.history
    seen = len(history)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        supervisor.ensure_running()
        current = supervisor.current
        assert current is not None
        if any(op.process == current.name and op.f == f for op in history.ops[seen:]):
            return
        time.sleep(0.005)
    raise TimeoutError(f"the application recorded no {f} within {timeout} s")


# -- the faults ----------------------------------------------------------------------------------

def _kill_for(nemesis: Nemesis, node: int, down: float, what: str) -> None:
    nemesis.history.nemesis("target", {"what": what, "node": node})
    nemesis.kill(node)
    time.sleep(down)
    nemesis.start(node)


def kill_group_coordinator(group: str = "eos-group", down: float = 3.0) -> EosFault:
    """kill -9 the broker leading the group's ``__consumer_offsets`` partition, which holds
    the transactional offset commits and their markers."""
    def apply(nemesis: Nemesis, _supervisor: LoopSupervisor) -> None:
        _kill_for(nemesis, coordinator(nemesis, GROUP_TOPIC_INTERNAL, group), down,
                  "group coordinator")
    return EosFault("kill-group-coordinator", apply)


def kill_txn_coordinator(transactional_id: str = "eos-loop", down: float = 3.0) -> EosFault:
    """kill -9 the broker leading the transactional id's ``__transaction_state`` partition."""
    def apply(nemesis: Nemesis, _supervisor: LoopSupervisor) -> None:
        _kill_for(nemesis, coordinator(nemesis, TXN_TOPIC_INTERNAL, transactional_id), down,
                  "transaction coordinator")
    return EosFault("kill-txn-coordinator", apply)


def kill_output_leader(output_topic: str = "eos-out", group: str = "eos-group",
                       transactional_id: str = "eos-loop", down: float = 3.0) -> EosFault:
    """kill -9 the leader of an output partition, one that is neither coordinator if there
    is one (seeded choice)."""
    def apply(nemesis: Nemesis, _supervisor: LoopSupervisor) -> None:
        coordinators = {coordinator(nemesis, GROUP_TOPIC_INTERNAL, group),
                        coordinator(nemesis, TXN_TOPIC_INTERNAL, transactional_id)}
        partitions = sorted(p for p, _ in _leaders(nemesis, output_topic))
        leaders = {nemesis.leader(output_topic, p) for p in partitions}
        choice = sorted(leaders - coordinators) or sorted(leaders)
        _kill_for(nemesis, nemesis.random.choice(choice), down, "output leader")
    return EosFault("kill-output-leader", apply)


def _leaders(nemesis: Nemesis, topic: str) -> list[tuple[int, int]]:
    found = []
    partition = 0
    while (state := nemesis.view.partition_state(topic, partition)) is not None:
        found.append((partition, int(str(state["leader"]))))
        partition += 1
    return found


def kill_loop(when: str = "committing", down: float = 0.5) -> EosFault:
    """kill -9 the application the moment it calls ``commit_transaction`` (``committing``)
    or begins a transaction (``txn``), then start a new incarnation ``down`` seconds later:
    its ``init_transactions`` fences the dead one and aborts its open transaction."""
    def apply(nemesis: Nemesis, supervisor: LoopSupervisor) -> None:
        _wait_for(supervisor, when)
        if when == "txn":  # somewhere among its produces
            time.sleep(nemesis.random.uniform(0.0, 0.05))
        supervisor.kill()
        time.sleep(down)
        supervisor.start()
    return EosFault(f"kill-loop-{when}", apply)


def restart_cluster(timeout: float = 60.0) -> EosFault:
    """Stop the application (SIGTERM) and every broker cleanly, start them again, read the
    group's committed offsets (a ``committed-after-restart`` event) and start a fresh group
    member (a dynamic one, not the static member that left)."""
    def apply(nemesis: Nemesis, supervisor: LoopSupervisor) -> None:
        supervisor.stop()
        settings = supervisor.settings
        nemesis.close()  # its ZooKeeper connection: ZooKeeper restarts too
        nemesis.history.nemesis("cluster-stop", {})
        nemesis.cluster.stop()
        nemesis.history.nemesis("cluster-start", {})
        nemesis.cluster.start(timeout)
        partitions = range(_partitions(nemesis, settings.input))
        try:
            offsets = group_offsets(settings.bootstrap, settings.group, settings.input,
                                    partitions, timeout=timeout)
            error = None
        except KafkaException as exc:
            offsets, error = {}, str(exc)
        nemesis.history.event(NEMESIS, "info", COMMITTED_AFTER_RESTART,
                              {"offsets": offsets, "error": error})
        supervisor.start(instance_id="")
    return EosFault("restart-cluster", apply)


def _partitions(nemesis: Nemesis, topic: str) -> int:
    return len(_leaders(nemesis, topic))
