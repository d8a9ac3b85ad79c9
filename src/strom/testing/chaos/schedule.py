"""A seeded fault schedule: create the topic, start the workload (producers, readers, the
partition-state observer), apply each fault in turn ``interval`` seconds apart, heal
everything, let the cluster settle, stop the workload, read every partition back, stop the
cluster, read each replica's log from disk and run the checker.

    result = run_schedule(cluster, [kill_leader(), pause_leader(), rolling_restart()],
                          ScheduleConfig(seed=7))
    assert result.check.valid, result.check.summary()

A :class:`Fault` is a name and a function of the :class:`Nemesis`; the builders below are the
issue's fault list. ``config.seed`` fixes every random choice the nemesis makes (which broker
to kill when several qualify); timing still depends on the machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from strom.testing.chaos.checker import CheckConfig, CheckResult, check
from strom.testing.chaos.cluster import Cluster
from strom.testing.chaos.history import History
from strom.testing.chaos.model import ReadRecord, ReplicaLog
from strom.testing.chaos.nemesis import Nemesis
from strom.testing.chaos.replicas import read_replica, read_replicas
from strom.testing.chaos.workload import ProducerWorker, ReaderWorker, create_topic, read_all
from strom.testing.chaos.zkview import StateObserver


@dataclass(frozen=True)
class Fault:
    name: str
    apply: Callable[[Nemesis], None]


@dataclass(frozen=True)
class ScheduleConfig:
    topic: str = "chaos"
    partitions: int = 3
    replication_factor: int = 3
    min_insync_replicas: int = 2
    unclean_leader_election: bool = False
    producers: int = 2
    rate: float = 100.0  # sends per second per producer
    readers: int = 1
    warmup: float = 2.0
    interval: float = 4.0
    settle: float = 5.0
    seed: int = 0
    message_timeout_ms: int = 30000
    topic_configs: dict[str, str] = field(default_factory=dict)
    #: stop the cluster at the end and compare the replicas' logs on disk.
    read_replicas: bool = True
    #: write the history here as JSON lines (for post-mortems).
    history_path: Path | None = None


@dataclass
class ScheduleResult:
    history: History
    reads: dict[int, list[ReadRecord]]
    replicas: dict[int, dict[int, ReplicaLog]]
    check: CheckResult


def run_schedule(cluster: Cluster, faults: Sequence[Fault],
                 config: ScheduleConfig | None = None) -> ScheduleResult:
    config = config or ScheduleConfig()
    history = History()
    partitions = range(config.partitions)
    topic_configs = {"min.insync.replicas": str(config.min_insync_replicas),
                     "unclean.leader.election.enable":
                         str(config.unclean_leader_election).lower(),
                     **config.topic_configs}
    create_topic(cluster.bootstrap, config.topic, config.partitions, config.replication_factor,
                 topic_configs)
    nemesis = Nemesis(cluster, history, seed=config.seed)
    topic_id = nemesis.view.topic_id(config.topic)
    observer = StateObserver(cluster.zookeeper_connect, config.topic, partitions, history)
    observer.start()
    producers = [ProducerWorker(f"p{i}", cluster.bootstrap, config.topic, history,
                                rate=config.rate,
                                message_timeout_ms=config.message_timeout_ms).start()
                 for i in range(config.producers)]
    readers = [ReaderWorker(f"r{i}", cluster.bootstrap, config.topic, partitions,
                            history).start() for i in range(config.readers)]
    try:
        time.sleep(config.warmup)
        apply_faults(nemesis, faults, config.interval)
        time.sleep(config.settle)
    finally:
        for producer in producers:
            producer.stop()
        for reader in readers:
            reader.stop()
        observer.poll_once()
        observer.stop()
        nemesis.close()
    reads = read_all(cluster.bootstrap, config.topic, partitions)
    replicas: dict[int, dict[int, ReplicaLog]] = {}
    if config.read_replicas:
        cluster.stop()
        replicas = read_replicas({node: broker.data_dir
                                  for node, broker in cluster.brokers.items()},
                                 config.topic, partitions)
    result = check(history.ops, reads, replicas,
                   CheckConfig(min_insync_replicas=config.min_insync_replicas,
                               unclean_leader_election=config.unclean_leader_election),
                   topic_id=topic_id)
    history.nemesis("checked", {"valid": result.valid, "counts": result.counts})
    if config.history_path is not None:
        history.write_jsonl(config.history_path)
    return ScheduleResult(history, reads, replicas, result)


def apply_faults(nemesis: Nemesis, faults: Sequence[Fault], interval: float) -> None:
    """Apply each fault in turn (a ``fault`` event first), ``interval`` seconds apart, then
    heal everything (also when a fault raised)."""
    try:
        for fault in faults:
            nemesis.history.nemesis("fault", {"name": fault.name})
            fault.apply(nemesis)
            time.sleep(interval)
    finally:
        nemesis.heal_all()


# -- the faults ------------------------------------------------------------------------------

def kill_restart(node: int, down: float = 1.0) -> Fault:
    """kill -9 broker ``node``, start it again ``down`` seconds later."""
    def apply(nemesis: Nemesis) -> None:
        nemesis.kill(node)
        time.sleep(down)
        nemesis.start(node)
    return Fault(f"kill-restart-{node}", apply)


def kill_leader(topic: str = "chaos", partition: int = 0, down: float = 3.0) -> Fault:
    def apply(nemesis: Nemesis) -> None:
        node = nemesis.kill_leader(topic, partition)
        time.sleep(down)
        nemesis.start(node)
    return Fault(f"kill-leader-{topic}-{partition}", apply)


def kill_controller(down: float = 3.0) -> Fault:
    def apply(nemesis: Nemesis) -> None:
        node = nemesis.kill_controller()
        time.sleep(down)
        nemesis.start(node)
    return Fault("kill-controller", apply)


def pause_leader(topic: str = "chaos", partition: int = 0, paused: float = 6.0) -> Fault:
    """SIGSTOP the leader for ``paused`` seconds, then SIGCONT it. Longer than the brokers'
    ZooKeeper session (the fixture's 2 s), it loses its session and leadership: a zombie that
    must not accept writes it cannot replicate. Shorter (the 18 s default), it is a slow
    broker, which must not be taken for a dead one."""
    def apply(nemesis: Nemesis) -> None:
        node = nemesis.leader(topic, partition)
        nemesis.pause(node)
        time.sleep(paused)
        nemesis.resume(node)
    return Fault(f"pause-leader-{topic}-{partition}", apply)


def stall_leader(topic: str = "chaos", partition: int = 0) -> Fault:
    """Block the leader's event loop (for the cluster's stall length): a slow broker, whose
    process and sockets live on, must not be taken for a dead one."""
    def apply(nemesis: Nemesis) -> None:
        nemesis.stall(nemesis.leader(topic, partition))
    return Fault(f"stall-leader-{topic}-{partition}", apply)


def expire_leader_session(topic: str = "chaos", partition: int = 0) -> Fault:
    def apply(nemesis: Nemesis) -> None:
        nemesis.expire_session(nemesis.leader(topic, partition))
    return Fault(f"expire-session-leader-{topic}-{partition}", apply)


def isolate_leader(topic: str = "chaos", partition: int = 0, duration: float = 6.0,
                   zookeeper: bool = False) -> Fault:
    def apply(nemesis: Nemesis) -> None:
        nemesis.isolate(nemesis.leader(topic, partition), zookeeper=zookeeper)
        time.sleep(duration)
        nemesis.heal_network()
    suffix = "-and-zookeeper" if zookeeper else ""
    return Fault(f"isolate-leader-{topic}-{partition}{suffix}", apply)


def rolling_restart() -> Fault:
    return Fault("rolling-restart", lambda nemesis: nemesis.rolling_restart())


def cut_log_tail(node: int, topic: str, partition: int, records: int) -> Fault:
    """kill -9 ``node``, drop the last ``records`` records of its copy, start it again. On a
    follower this is a disk that lost a tail (it must catch up); on a single broker it loses
    acknowledged records on purpose (the checker must say so)."""
    def apply(nemesis: Nemesis) -> None:
        nemesis.kill(node)
        data_dir = nemesis.cluster.brokers[node].data_dir
        end = read_replica(node, data_dir, topic, partition).log_end
        nemesis.truncate(node, topic, partition, max(0, end - records))
        nemesis.start(node)
    return Fault(f"cut-log-tail-{node}-{topic}-{partition}-{records}", apply)


def truncate_follower(topic: str = "chaos", partition: int = 0, records: int = 20) -> Fault:
    """A follower of the partition restarts with the last ``records`` records cut off."""
    def apply(nemesis: Nemesis) -> None:
        state = nemesis.view.partition_state(topic, partition)
        if state is None:
            raise LookupError(f"{topic}-{partition} has no state")
        isr = state["isr"]
        assert isinstance(isr, list)
        followers = [b for b in isr if b != state["leader"]]
        node = nemesis.random.choice(followers)
        cut_log_tail(node, topic, partition, records).apply(nemesis)
    return Fault(f"truncate-follower-{topic}-{partition}", apply)
