"""Fault schedules aimed at the group and transaction coordinators (issue 9: coordinators move
with their internal partitions' leaders; transaction markers reach partition leaders on other
brokers).

:func:`run_coordinator_schedule` runs, on one cluster and at the same time,

* the transactional workload (:mod:`~strom.testing.chaos.txn_workload`): ``txn_producers``
  transactional producers writing transactions that span every partition of ``txn_topic``
  (RF=3, min ISR 2: leaders spread over the brokers, so markers go to other brokers), with a
  read_committed and a read_uncommitted reader;
* the group workload (:mod:`~strom.testing.chaos.group_workload`): ``group_members``
  members of one group consuming ``group_topic`` (fed by an idempotent producer) and
  committing synchronously;

then applies the faults one after another, heals, settles, stops the workload, reads the
transactional topic back at both isolation levels, fetches the group's committed offsets and
runs both checkers (:func:`~strom.testing.chaos.txn_checker.check_transactions`,
:func:`~strom.testing.chaos.group_checker.check_group`).

The faults find their target at the moment they run: the coordinator of a group or a
transactional id is the leader of its internal partition (Kafka's
``abs(hashCode) % partitions`` of ``__consumer_offsets`` / ``__transaction_state``), read
from ZooKeeper. "Mid-commit" faults wait for a producer's ``committing`` event (its
``commit_transaction`` call has begun) and strike at once, so EndTxn or its markers are in
flight. ``config.seed`` fixes the nemesis' choices and each producer's commit / abort
sequence; timing depends on the machine.

The cluster should use few internal partitions (:data:`CLUSTER_CONFIGS`) so they are created
quickly.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

from strom.coordinator.codec import partition_for
from strom.testing.chaos.checker import CheckResult
from strom.testing.chaos.cluster import Cluster
from strom.testing.chaos.group_checker import check_group
from strom.testing.chaos.group_workload import GroupMemberWorker, committed_offsets
from strom.testing.chaos.history import History
from strom.testing.chaos.nemesis import Nemesis
from strom.testing.chaos.schedule import Fault, apply_faults
from strom.testing.chaos.txn_checker import TxnReads, check_transactions
from strom.testing.chaos.txn_workload import TxnProducerWorker, read_committed_all
from strom.testing.chaos.workload import ProducerWorker, ReaderWorker, create_topic

GROUP_TOPIC_INTERNAL = "__consumer_offsets"
TXN_TOPIC_INTERNAL = "__transaction_state"
#: broker settings for a coordinator schedule's cluster: few internal partitions (created at
#: the first FindCoordinator), timed-out transactions aborted within seconds.
CLUSTER_CONFIGS: dict[str, object] = {
    "offsets.topic.num.partitions": 6,
    "transaction.state.log.num.partitions": 6,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 2000,
    # KIP-848 members learn of a new assignment at their next heartbeat
    "group.consumer.heartbeat.interval.ms": 500,
    "group.consumer.session.timeout.ms": 6000,
}


@dataclass(frozen=True)
class CoordScheduleConfig:
    txn_topic: str = "txn"
    group_topic: str = "grp"
    group: str = "chaos-group"
    partitions: int = 3
    replication_factor: int = 3
    min_insync_replicas: int = 2
    txn_producers: int = 2
    #: records per transaction, round-robin over the partitions.
    txn_records: int = 6
    abort_ratio: float = 0.2
    group_members: int = 2
    #: the members' ``group.protocol``: ``classic`` or ``consumer`` (KIP-848)
    group_protocol: str = "classic"
    group_rate: float = 50.0  # records per second into the group's topic
    warmup: float = 2.0
    interval: float = 4.0
    settle: float = 6.0
    seed: int = 0
    history_path: Path | None = None


@dataclass
class CoordScheduleResult:
    history: History
    txn: CheckResult
    group: CheckResult
    committed: dict[int, int]
    seconds: float
    txn_leaders: dict[int, int] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return self.txn.valid and self.group.valid

    def summary(self) -> str:
        return f"txn: {self.txn.summary()} | group: {self.group.summary()} | " \
               f"{self.seconds:.1f} s"


def transactional_id(producer: int) -> str:
    """The transactional id of the ``producer``-th transactional producer (``t<n>``)."""
    return f"chaos-t{producer}"


def run_coordinator_schedule(cluster: Cluster, faults: Sequence[Fault],
                             config: CoordScheduleConfig | None = None) -> CoordScheduleResult:
    """Run the schedule (module docstring); the history goes to ``config.history_path``
    (if set) whatever happens, for a post-mortem."""
    config = config or CoordScheduleConfig()
    history = History()
    try:
        return _run(cluster, faults, config, history)
    finally:
        if config.history_path is not None:
            history.write_jsonl(config.history_path)


def _run(cluster: Cluster, faults: Sequence[Fault], config: CoordScheduleConfig,
         history: History) -> CoordScheduleResult:
    started = time.monotonic()
    partitions = list(range(config.partitions))
    topic_configs = {"min.insync.replicas": str(config.min_insync_replicas)}
    for topic in (config.txn_topic, config.group_topic):
        create_topic(cluster.bootstrap, topic, config.partitions, config.replication_factor,
                     topic_configs)
    nemesis = Nemesis(cluster, history, seed=config.seed)
    txn_leaders = {p: nemesis.leader(config.txn_topic, p) for p in partitions}
    history.nemesis("txn-leaders", {"leaders": txn_leaders})
    feeder = ProducerWorker("g-feed", cluster.bootstrap, config.group_topic, history,
                            rate=config.group_rate).start()
    producers = [TxnProducerWorker(f"t{i}", cluster.bootstrap, config.txn_topic, partitions,
                                   history, seed=config.seed, records=config.txn_records,
                                   abort_ratio=config.abort_ratio).start()
                 for i in range(config.txn_producers)]
    readers = [ReaderWorker(f"r-{level}", cluster.bootstrap, config.txn_topic, partitions,
                            history, {"isolation.level": level}).start()
               for level in ("read_committed", "read_uncommitted")]
    members = [GroupMemberWorker(f"m{i}", cluster.bootstrap, config.group,
                                 config.group_topic, history,
                                 protocol=config.group_protocol).start()
               for i in range(config.group_members)]
    try:
        _await_workload(history, config)
        time.sleep(config.warmup)
        apply_faults(nemesis, faults, config.interval)
        time.sleep(config.settle)
    finally:
        for producer in producers:
            producer.stop()
        for member in members:
            member.stop()
        for reader in readers:
            reader.stop()
        feeder.stop()
        nemesis.close()
    committed, uncommitted, stuck = read_committed_all(cluster.bootstrap, config.txn_topic,
                                                       partitions)
    offsets = committed_offsets(cluster.bootstrap, config.group, config.group_topic,
                                partitions)
    history.nemesis("final-offsets", {"offsets": offsets})
    txn = check_transactions(history.ops, TxnReads(committed, uncommitted, stuck))
    group = check_group(history.ops, offsets, partitions)
    result = CoordScheduleResult(history, txn, group, offsets, time.monotonic() - started,
                                 txn_leaders)
    history.nemesis("checked", {"valid": result.valid, "txn": txn.counts,
                                "group": group.counts})
    return result


def _await_workload(history: History, config: CoordScheduleConfig,
                    timeout: float = 60.0) -> None:
    """Wait until a transaction committed and the group acknowledged a commit (the internal
    topics exist and both coordinators serve) before any fault."""
    deadline = time.monotonic() + timeout
    while True:
        ops = history.ops
        txn = any(op.f == "txn" and op.type == "ok" for op in ops)
        group = any(op.f == "commit" and op.type == "ok" for op in ops)
        if txn and group:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"workload did not start: txn committed {txn}, "
                               f"group committed {group}")
        time.sleep(0.1)


# -- finding the coordinators ------------------------------------------------------------------

def _internal_partitions(nemesis: Nemesis, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": nemesis.cluster.bootstrap})
    found = admin.list_topics(topic, timeout=10).topics.get(topic)
    if found is None or not found.partitions:
        raise LookupError(f"{topic} does not exist yet")
    return len(found.partitions)


def coordinator(nemesis: Nemesis, internal_topic: str, key: str) -> int:
    """The broker leading ``key``'s partition of ``internal_topic`` (its coordinator)."""
    partition = partition_for(key, _internal_partitions(nemesis, internal_topic))
    return nemesis.leader(internal_topic, partition)


def wait_for_commit(nemesis: Nemesis, producer: str, timeout: float = 30.0) -> str:
    """Block until ``producer`` calls ``commit_transaction`` (a ``committing`` event newer
    than this call); the transaction's name."""
    seen = len(nemesis.history)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for op in nemesis.history.ops[seen:]:
            if op.f == "committing" and op.process == producer:
                return str(op.value["txn"])
        time.sleep(0.001)
    raise TimeoutError(f"{producer} began no commit within {timeout} s")


# -- the faults ----------------------------------------------------------------------------------

def kill_group_coordinator(group: str = "chaos-group", down: float = 3.0) -> Fault:
    """kill -9 the broker leading the group's ``__consumer_offsets`` partition."""
    def apply(nemesis: Nemesis) -> None:
        node = nemesis.kill(coordinator(nemesis, GROUP_TOPIC_INTERNAL, group))
        time.sleep(down)
        nemesis.start(node)
    return Fault(f"kill-group-coordinator-{group}", apply)


def kill_txn_coordinator(producer: int = 0, down: float = 3.0) -> Fault:
    """kill -9 the broker leading the producer's ``__transaction_state`` partition."""
    def apply(nemesis: Nemesis) -> None:
        tid = transactional_id(producer)
        node = nemesis.kill(coordinator(nemesis, TXN_TOPIC_INTERNAL, tid))
        time.sleep(down)
        nemesis.start(node)
    return Fault(f"kill-txn-coordinator-t{producer}", apply)


def pause_txn_coordinator_mid_commit(producer: int = 0, paused: float = 5.0) -> Fault:
    """SIGSTOP the producer's transaction coordinator the moment it begins a commit, long
    enough for its ZooKeeper session to expire (leadership moves), then SIGCONT it: the
    zombie must not complete or fence anything the new coordinator owns."""
    def apply(nemesis: Nemesis) -> None:
        tid = transactional_id(producer)
        node = coordinator(nemesis, TXN_TOPIC_INTERNAL, tid)
        txn = wait_for_commit(nemesis, f"t{producer}")
        nemesis.pause(node)
        nemesis.history.nemesis("paused-mid-commit", {"node": node, "txn": txn})
        time.sleep(paused)
        nemesis.resume(node)
    return Fault(f"pause-txn-coordinator-mid-commit-t{producer}", apply)


def kill_data_leader_mid_commit(topic: str = "txn", producer: int = 0,
                                down: float = 3.0) -> Fault:
    """kill -9 the leader of a partition of ``topic`` that the producer's coordinator does not
    lead, the moment a commit begins: its marker is in flight to a broker that dies, and must
    reach the partition's next leader."""
    def apply(nemesis: Nemesis) -> None:
        tid = transactional_id(producer)
        coord = coordinator(nemesis, TXN_TOPIC_INTERNAL, tid)
        partitions = range(_internal_partitions(nemesis, topic))
        leaders = {nemesis.leader(topic, p) for p in partitions} - {coord}
        if not leaders:
            raise LookupError(f"every partition of {topic} is led by the coordinator {coord}")
        target = nemesis.random.choice(sorted(leaders))
        txn = wait_for_commit(nemesis, f"t{producer}")
        nemesis.kill(target)
        nemesis.history.nemesis("killed-mid-commit", {"node": target, "txn": txn})
        time.sleep(down)
        nemesis.start(target)
    return Fault(f"kill-data-leader-mid-commit-{topic}-t{producer}", apply)
