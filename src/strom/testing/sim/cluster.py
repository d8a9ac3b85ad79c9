"""A deterministic in-process cluster: N :class:`SimBroker`, the store / controller node,
idempotent producers and a seeded nemesis on one manual clock, checked by the chaos checker.

``run_simulation(seed)`` — everything from the one seed:

1. brokers ``1..n`` start (real logs under a temporary directory) and register through
   heartbeats; one topic (``partitions`` x replication factor 3, ``min.insync.replicas`` 2)
   is created in the store once all are registered;
2. for ``workload_ms`` producers send while the nemesis, every 100-400 ms, crashes a broker
   (restarted 50-600 ms later), cuts a link between two brokers or between a broker and the
   store, or pauses a broker (each healed 100-800 ms later);
3. every fault is healed, every broker runs, and the cluster gets ``settle_ms`` to converge;
4. the brokers stop (high watermarks checkpointed, logs closed) and the checker runs over
   the history, the final read (each partition's leader's log below its high watermark) and
   the logs of each partition's final ISR members, read from their data directories — the
   same :func:`~strom.testing.chaos.checker.check` as the real-process schedules.

No threads and no sleeps: every step is a callback on a
:class:`~strom.testing.scheduler.ManualScheduler`, ordered by time and, at equal times, by
scheduling order, so one seed replays exactly. The run happens inside an asyncio loop only
because the replica manager creates futures for parked produces; nothing is awaited.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom.common.clock import ManualClock
from strom.metadata.changes import PutTopic
from strom.metadata.image import PartitionInfo, TopicInfo
from strom.replication.partition import Partition
from strom.testing.chaos.checker import CheckConfig, CheckResult, check
from strom.testing.chaos.history import History, OpType
from strom.testing.chaos.model import ReadRecord, ReplicaLog
from strom.testing.chaos.replicas import read_replica
from strom.testing.scheduler import ManualScheduler
from strom.testing.sim.broker import SimBroker
from strom.testing.sim.network import STORE, Network
from strom.testing.sim.producer import SimProducer
from strom.testing.sim.store import StoreNode

TOPIC = "sim"
REPLICATION_FACTOR = 3
MIN_INSYNC = 2


class SimHistory(History):
    """A :class:`History` whose times are the simulation's clock (seconds from the start)."""

    clock: ManualClock
    origin_ms: int

    def _append(self, process: str, type_: OpType, f: str, value: Mapping[str, Any],
                invoke_index: int = -1) -> Any:
        op = super()._append(process, type_, f, value, invoke_index)
        now = self.clock.now_ms()
        fixed = type(op)(op.index, op.process, op.type, op.f, op.value,
                         (now - self.origin_ms) / 1000, now / 1000, op.invoke_index)
        with self._lock:
            self._ops[op.index] = fixed
        return fixed


@dataclass
class SimResult:
    seed: int
    result: CheckResult
    history: History
    stats: dict[str, int] = field(default_factory=dict)
    faults: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return self.result.valid


class Simulation:
    """See the module docstring; :meth:`run` once."""

    def __init__(self, seed: int, data_dir: Path, *, brokers: int = 3, partitions: int = 2,
                 producers: int = 3, workload_ms: int = 3000, settle_ms: int = 4000,
                 partition_type: type[Partition] = Partition) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = ManualClock()
        self.scheduler = ManualScheduler(self.clock)
        self.net = Network(self.scheduler, self.rng)
        self.history = SimHistory()
        self.history.clock = self.clock
        self.history.origin_ms = self.clock.now_ms()
        self.topic = TOPIC
        self.partitions = partitions
        self.tick_ms = 10
        self.backoff_ms = 50
        self.request_timeout_ms = 300
        self.delivery_timeout_ms = 2000
        self.session_timeout_ms = 400
        self.replica_lag_ms = 300
        self.workload_ms = workload_ms
        self.settle_ms = settle_ms
        self.workload_end_ms = self.clock.now_ms() + 500 + workload_ms
        self._producer_ids = 1000
        self.store_node = StoreNode(self)
        self.brokers = {i: SimBroker(self, i, data_dir / f"broker-{i}", partition_type)
                        for i in range(1, brokers + 1)}
        self.producers = [SimProducer(self, i) for i in range(producers)]
        self.faults: list[str] = []

    def next_producer_id(self) -> int:
        self._producer_ids += 1
        return self._producer_ids

    def holders(self, partition: int, offset: int, value: str) -> list[int]:
        """The brokers whose log holds ``value`` at ``offset`` of ``partition`` right now
        (perfect knowledge: each broker's files, alive or crashed — a crash keeps what was
        written; segments are written unbuffered, so the files are current)."""
        return [b for b, broker in sorted(self.brokers.items())
                if any(r.offset == offset and r.value == value for r in read_replica(
                    b, broker.data_dir, self.topic, partition).records)]

    # -- the run ---------------------------------------------------------------------------
    def run(self) -> SimResult:
        self.store_node.start()
        for broker in self.brokers.values():
            broker.start()
        self.scheduler.advance(300)  # registrations
        self._create_topic()
        self.scheduler.advance(200)
        for producer in self.producers:
            producer.start()
        self._schedule_fault()
        self.scheduler.advance(self.workload_end_ms - self.clock.now_ms())
        self._heal_everything()
        self.scheduler.advance(self.settle_ms)
        return self._check()

    def _create_topic(self) -> None:
        ids = sorted(self.brokers)
        parts = []
        for index in range(self.partitions):
            replicas = tuple(ids[(index + k) % len(ids)] for k in range(REPLICATION_FACTOR))
            parts.append(PartitionInfo(index, replicas[0], 0, replicas, replicas))
        topic = TopicInfo(self.topic, uuid.UUID(int=self.seed + 1), tuple(parts),
                          {"min.insync.replicas": str(MIN_INSYNC)})
        store = self.store_node.store
        store.write(store.image.epoch, [PutTopic(topic)])

    # -- the nemesis -------------------------------------------------------------------------
    def _schedule_fault(self) -> None:
        self.scheduler.call_later(self.rng.randint(100, 400), self._fault)

    def _fault(self) -> None:
        if self.clock.now_ms() >= self.workload_end_ms:
            return
        self._schedule_fault()
        rng = self.rng
        ids = sorted(self.brokers)
        victim = rng.choice(ids)
        kind = rng.choice(["crash", "cut-brokers", "cut-store", "pause"])
        heal_after = rng.randint(100, 800)
        if kind == "crash":
            if self.brokers[victim].alive:
                self._record("crash", victim)
                self.brokers[victim].crash()
                self.scheduler.call_later(rng.randint(50, 600), lambda: self._restart(victim))
        elif kind == "cut-brokers":
            other = rng.choice([i for i in ids if i != victim])
            self._record("cut", victim, other)
            self.net.cut(victim, other)
            self.scheduler.call_later(heal_after, lambda: self.net.heal(victim, other))
        elif kind == "cut-store":
            self._record("cut", victim, STORE)
            self.net.cut(victim, STORE)
            self.scheduler.call_later(heal_after, lambda: self.net.heal(victim, STORE))
        else:
            self._record("pause", victim)
            self.net.pause(victim)
            self.scheduler.call_later(heal_after, lambda: self.net.resume(victim))

    def _record(self, what: str, *nodes: int) -> None:
        self.faults.append(f"{self.clock.now_ms() - self.history.origin_ms}ms {what} {nodes}")
        self.history.nemesis(what, {"nodes": list(nodes)})

    def _restart(self, broker: int) -> None:
        if not self.brokers[broker].alive:
            self._record("restart", broker)
            self.brokers[broker].start()

    def _heal_everything(self) -> None:
        self.net.heal_all()
        for node in list(self.net.paused):
            self.net.resume(node)
        for broker in self.brokers.values():
            if not broker.alive:
                broker.start()
        self.net.drop_rate = 0.0

    # -- the check ---------------------------------------------------------------------------
    def _check(self) -> SimResult:
        image = self.store_node.store.image
        for broker in self.brokers.values():
            broker.stop()
        topic = image.topics[self.topic]
        final_reads: dict[int, list[ReadRecord]] = {}
        replica_logs: dict[int, dict[int, ReplicaLog]] = {}
        for p in topic.partitions:
            copies = {b: read_replica(b, self.brokers[b].data_dir, self.topic, p.partition)
                      for b in p.isr}
            replica_logs[p.partition] = copies
            leader = copies.get(p.leader)
            hw = leader.high_watermark if leader is not None else None
            final_reads[p.partition] = [r for r in leader.records if r.offset < (hw or 0)
                                        ] if leader is not None else []
        result = check(self.history.ops, final_reads, replica_logs,
                       CheckConfig(min_insync_replicas=MIN_INSYNC))
        stats = {"sent": self.net.sent, "dropped": self.net.dropped,
                 "faults": len(self.faults), "sim_ms": self.clock.now_ms()
                 - self.history.origin_ms}
        return SimResult(self.seed, result, self.history, stats, list(self.faults))


def run_simulation(seed: int, *, partition_type: type[Partition] = Partition,
                   **options: Any) -> SimResult:
    """Run one seeded schedule in a temporary directory (removed afterwards)."""
    shm = Path("/dev/shm")  # the logs fsync: memory-backed files keep a run CPU-bound
    directory = Path(tempfile.mkdtemp(prefix=f"strom-sim-{seed}-",
                                      dir=shm if shm.is_dir() else None))
    try:
        sim = Simulation(seed, directory, partition_type=partition_type, **options)

        async def in_loop() -> SimResult:
            return sim.run()

        return asyncio.run(in_loop())
    finally:
        shutil.rmtree(directory, ignore_errors=True)
