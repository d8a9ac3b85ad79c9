"""One simulated broker: the real storage, ReplicaManager, Partitions and follower fetchers,
driven by messages of the scripted network instead of sockets and an event loop.

What a broker does each ``tick_ms`` (seeded jitter): every idle fetcher sends its
OffsetForLeaderEpoch or Fetch request (one request in flight per fetcher, failed after
``request_timeout_ms`` without an answer), parked acks=-1 produces a timeout completed are
answered, and — less often — the ISR shrink check runs, the high watermarks are
checkpointed and a heartbeat goes to the store (which keeps the registration alive). A
parked produce completed by an event (a follower's fetch, an image, a refused ISR change)
is answered by that event, at that moment, as the real purgatory answers it.

Requests are answered as the real handlers do (the leader reads to its log end for a
follower and records the follower's fetch offset; current-leader-epoch checks of KIP-320;
NOT_LEADER_OR_FOLLOWER from a non-leader), with the answer sent back over the network.

Crash (:meth:`SimBroker.crash`): the process dies. What was written to the log files
survives (the OS had it: a process crash, not a power loss); everything in memory — roles,
ISR proposals, fetcher state, parked produces, high watermarks not yet checkpointed — is
gone. :meth:`SimBroker.start` opens the data directory again (log recovery without the
clean-shutdown marker) and starts with no metadata until the store sends an image.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from strom.broker.handlers.common import check_leader_epoch
from strom.common.config import BrokerConfig, TopicConfig, validate_topic_configs
from strom.common.errors import NotLeaderOrFollowerError, UnknownTopicOrPartitionError
from strom.common.types import TopicPartition
from strom.metadata.image import MetadataImage
from strom.replication.delayed import PartitionAppendResult
from strom.replication.fetcher import (
    EpochAnswer,
    EpochRequest,
    FetchAnswer,
    FetcherSettings,
    FetchRequest,
    Phase,
    ReplicaFetcher,
)
from strom.replication.partition import FetchIsolation, IsrChange, Partition
from strom.replication.replica_manager import AppendOrigin, ReplicaManager, as_kafka_error
from strom.storage.log_manager import LogManager
from strom.storage.segment import FileRegion
from strom.testing.sim.network import STORE

if TYPE_CHECKING:
    import asyncio

    from strom.testing.sim.cluster import Simulation

NONE = 0
T = TypeVar("T")


def _check_fetch_request(fetcher: ReplicaFetcher, logs: ReplicaManager,
                         request: FetchRequest | None, now_ms: int) -> None:
    """The fetcher's request (built from the partitions marked changed since its last one)
    asks for exactly the partitions that are fetching, unpaused and hosted under the topic
    id they were followed with, at their epoch and fetch offset — what a request built from
    every partition would ask (the log start aside: it may lag until the periodic rebuild).
    AssertionError otherwise."""
    expected = {}
    for tp in fetcher.partitions:
        state = fetcher.state(tp)
        partition = logs.follower(tp)
        if (state is not None and state.phase is Phase.FETCHING and partition is not None
                and state.delayed_until_ms <= now_ms and partition.topic_id == state.topic_id):
            expected[tp] = (state.leader_epoch, state.fetch_offset)
    asked = {} if request is None else {
        q.tp: (q.current_leader_epoch, q.fetch_offset) for q in request.partitions}
    assert asked == expected, f"fetch request {asked} where {expected} is due"


@dataclass(slots=True)
class ParkedProduce:
    """An acks=-1 produce waiting for the high watermark; answered once ``done``."""

    tp: TopicPartition
    results: dict[TopicPartition, PartitionAppendResult]
    done: asyncio.Future[None]
    reply: Callable[[PartitionAppendResult], None]


class SimBroker:
    """See the module docstring. ``partition_type`` plants a faulty Partition (tests)."""

    def __init__(self, sim: Simulation, node_id: int, data_dir: Path,
                 partition_type: type[Partition] = Partition) -> None:
        self.sim = sim
        self.node_id = node_id
        self.data_dir = data_dir
        self.partition_type = partition_type
        self.config = BrokerConfig({})
        self.alive = False
        self.incarnation = 0
        self.image: MetadataImage | None = None
        self.logs: LogManager | None = None
        self.replicas: ReplicaManager | None = None
        self.fetchers: dict[int, ReplicaFetcher] = {}
        #: What the replica manager follows (tp → leader, epoch), kept up to date by its
        #: update_followed.
        self.followed: dict[TopicPartition, tuple[int, int]] = {}
        self.in_flight: dict[int, int] = {}  # leader → request id awaiting an answer
        self.parked: list[ParkedProduce] = []
        self._request_ids = 0
        self._ticks = 0

    # -- lifecycle --------------------------------------------------------------------------
    def topic_config(self, topic: str) -> TopicConfig:
        info = self.image.topics.get(topic) if self.image is not None else None
        return TopicConfig(self.config, validate_topic_configs(info.configs) if info else {})

    def start(self) -> None:
        self.incarnation += 1
        self.sim.net.incarnation[self.node_id] = self.incarnation
        self.sim.net.down.discard(self.node_id)
        self.alive = True
        self.image = None
        self.logs = LogManager(self.data_dir, self.config, self.sim.clock)
        self.logs.load(self.topic_config)
        replicas = ReplicaManager(self.logs, self.topic_config, self.sim.clock, self.node_id,
                                  self.sim.scheduler)
        replicas.partition_type = self.partition_type
        replicas.fetching = self
        replicas.isr_writer = self
        self.replicas = replicas
        self.fetchers = {}
        self.followed = {}
        self.in_flight = {}
        self.parked = []
        self._schedule_tick(self.incarnation)

    def crash(self) -> None:
        """The process dies: files stay as written, memory is lost (module docstring)."""
        self.alive = False
        self.sim.net.down.add(self.node_id)
        self.replicas = None
        self.logs = None
        self.fetchers = {}
        self.followed = {}
        self.parked = []

    def stop(self) -> None:
        """End of the run: checkpoint and close the logs (the files are read afterwards)."""
        if self.replicas is not None and self.logs is not None:
            self.replicas.checkpoint_high_watermarks()
            self.logs.shutdown()
        self.crash()

    # -- the periodic work -----------------------------------------------------------------
    def _schedule_tick(self, incarnation: int) -> None:
        delay = self.sim.tick_ms + self.sim.rng.randint(0, self.sim.tick_ms // 2)
        self.sim.scheduler.call_later(delay, lambda: self._tick(incarnation))

    def _tick(self, incarnation: int) -> None:
        if not self.alive or incarnation != self.incarnation:
            return
        self._schedule_tick(incarnation)
        if self.node_id in self.sim.net.paused:
            return  # a stopped process does nothing
        replicas = self.replicas
        assert replicas is not None
        self._ticks += 1
        for leader in sorted(self.fetchers):
            if leader not in self.in_flight:
                self._send_fetcher_request(self.fetchers[leader])
        if self._ticks % 5 == 0:
            replicas.shrink_isrs(self.sim.replica_lag_ms)
            self.sim.net.send(self.node_id, STORE, lambda: self.sim.store_node.heartbeat(
                self.node_id, incarnation))
        self._answer_parked()  # e.g. timed out
        if self._ticks % 25 == 0:
            replicas.checkpoint_high_watermarks()

    # -- metadata ----------------------------------------------------------------------------
    def on_image(self, image: MetadataImage) -> None:
        if not self.alive or (self.image is not None and image.epoch <= self.image.epoch):
            return
        self.image = image
        assert self.replicas is not None
        self.replicas.apply_image(image)
        self._answer_parked()

    # FollowerFetching
    def update_followed(self, changes: Mapping[TopicPartition, tuple[int, int] | None]
                        ) -> None:
        for tp, target in changes.items():
            if target is None:
                self.followed.pop(tp, None)
            else:
                self.followed[tp] = target
        self._set_followed(self.followed)

    def _set_followed(self, followed: Mapping[TopicPartition, tuple[int, int]]) -> None:
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        for tp, (leader, epoch) in followed.items():
            by_leader.setdefault(leader, {})[tp] = epoch
        for leader in list(self.fetchers):
            if leader not in by_leader:
                del self.fetchers[leader]
                self.in_flight.pop(leader, None)
        for leader, epochs in by_leader.items():
            fetcher = self.fetchers.get(leader)
            if fetcher is None:
                assert self.replicas is not None
                fetcher = self.fetchers[leader] = ReplicaFetcher(
                    leader, 0, FetcherSettings(self.node_id, backoff_ms=self.sim.backoff_ms),
                    self.replicas)
            fetcher.remove_partitions([tp for tp in fetcher.partitions if tp not in epochs])
            fetcher.add_partitions(epochs)

    # IsrWriter
    def submit(self, change: IsrChange) -> None:
        incarnation = self.incarnation
        self.sim.net.send(self.node_id, STORE,
                          lambda: self.sim.store_node.write_isr(self.node_id, incarnation, change))
        # No answer (a cut link, a dropped message): the outcome is unknown (the write may have
        # happened), so it is sent again while still pending, as the real StoreIsrWriter retries.
        self.sim.scheduler.call_later(self.sim.request_timeout_ms,
                                      lambda: self._submit_again(incarnation, change))

    def _submit_again(self, incarnation: int, change: IsrChange) -> None:
        if self.alive and incarnation == self.incarnation and self.replicas is not None:
            partition = self.replicas.partition(change.tp)
            if partition is not None and partition.isr_state.pending == change:
                self.submit(change)

    def isr_change_failed(self, incarnation: int, change: IsrChange) -> None:
        if self.alive and incarnation == self.incarnation and self.replicas is not None:
            self.replicas.isr_change_failed(change)
            self._answer_parked()

    def isr_change_written(self, incarnation: int, change: IsrChange, epoch: int) -> None:
        if self.alive and incarnation == self.incarnation and self.replicas is not None:
            self.replicas.isr_change_written(change, epoch)
            self._answer_parked()

    # -- the follower side -------------------------------------------------------------------
    def _send_fetcher_request(self, fetcher: ReplicaFetcher) -> None:
        now = self.sim.clock.now_ms()
        leader = fetcher.source_id
        epoch_request = fetcher.epoch_request(now)
        request: EpochRequest | FetchRequest | None = (
            epoch_request if epoch_request is not None else fetcher.fetch_request(now))
        if (isinstance(request, FetchRequest) or request is None) and (
                self.replicas is not None):
            _check_fetch_request(fetcher, self.replicas, request, now)
        if request is None:
            return
        self._request_ids += 1
        request_id = self._request_ids
        self.in_flight[leader] = request_id
        incarnation = self.incarnation
        target = self.sim.brokers[leader]

        def answered(answers: Mapping[TopicPartition, EpochAnswer | FetchAnswer]) -> None:
            if not self._current(incarnation, leader, request_id, fetcher):
                return
            del self.in_flight[leader]
            at = self.sim.clock.now_ms()
            if isinstance(request, EpochRequest):
                fetcher.on_epoch_response(request, _only(answers, EpochAnswer), at)
            else:
                fetcher.on_fetch_response(request, _only(answers, FetchAnswer), at)

        def timed_out() -> None:
            if self._current(incarnation, leader, request_id, fetcher):
                del self.in_flight[leader]
                fetcher.on_request_failed(request.partitions, self.sim.clock.now_ms())

        self.sim.net.send(self.node_id, leader,
                          lambda: target.answer_replica_request(self.node_id, request, answered))
        self.sim.scheduler.call_later(self.sim.request_timeout_ms, timed_out)

    def _current(self, incarnation: int, leader: int, request_id: int,
                 fetcher: ReplicaFetcher) -> bool:
        return (self.alive and incarnation == self.incarnation
                and self.in_flight.get(leader) == request_id
                and self.fetchers.get(leader) is fetcher)

    # -- the leader side ----------------------------------------------------------------------
    def answer_replica_request(
        self, follower: int, request: EpochRequest | FetchRequest,
        reply: Callable[[Mapping[TopicPartition, EpochAnswer | FetchAnswer]], None],
    ) -> None:
        answers: dict[TopicPartition, EpochAnswer | FetchAnswer] = {}
        if isinstance(request, EpochRequest):
            for q in request.partitions:
                answers[q.tp] = self._epoch_answer(q.tp, q.current_leader_epoch, q.leader_epoch)
        else:
            for f in request.partitions:
                answers[f.tp] = self._fetch_answer(follower, f.tp, f.current_leader_epoch,
                                                   f.fetch_offset, f.partition_max_bytes)
        self.sim.net.send(self.node_id, follower, lambda: reply(answers))
        self._answer_parked()  # the follower's fetch offset may have moved the high watermark

    def _leader(self, tp: TopicPartition, current_leader_epoch: int) -> Partition:
        assert self.replicas is not None
        partition = self.replicas.partition(tp)
        if partition is None:
            raise UnknownTopicOrPartitionError(f"{self.node_id} hosts no {tp}")
        check_leader_epoch(current_leader_epoch, partition.leader_epoch)
        if not partition.is_leader:
            raise NotLeaderOrFollowerError(f"{self.node_id} does not lead {tp}")
        return partition

    def _epoch_answer(self, tp: TopicPartition, current: int, epoch: int) -> EpochAnswer:
        try:
            found, end = self._leader(tp, current).end_offset_for_epoch(epoch)
        except Exception as exc:
            return EpochAnswer(as_kafka_error(exc).code)
        return EpochAnswer(NONE, found, end)

    def _fetch_answer(self, follower: int, tp: TopicPartition, current: int, offset: int,
                      max_bytes: int) -> FetchAnswer:
        try:
            partition = self._leader(tp, current)
            data = partition.read(offset, max_bytes, FetchIsolation.LOG_END)
            partition.update_follower_fetch_state(follower, offset)
        except Exception as exc:
            assert self.replicas is not None
            known = self.replicas.partition(tp)
            return FetchAnswer(as_kafka_error(exc).code,
                               known.high_watermark if known else -1,
                               known.log_start_offset if known else -1)
        records = b"".join(_region_bytes(region) for region in data.regions)
        return FetchAnswer(NONE, partition.high_watermark, partition.log_start_offset, records)

    # -- produce (acks=-1) ----------------------------------------------------------------
    def produce(self, tp: TopicPartition, batch: bytes,
                reply: Callable[[PartitionAppendResult], None]) -> None:
        assert self.replicas is not None
        outcome = self.replicas.append({tp: memoryview(batch)}, required_acks=-1,
                                       origin=AppendOrigin.CLIENT,
                                       timeout_ms=self.sim.request_timeout_ms)
        if outcome.done is None:
            reply(outcome.results[tp])
        else:
            self.parked.append(ParkedProduce(tp, outcome.results, outcome.done, reply))

    def _answer_parked(self) -> None:
        waiting = []
        for parked in self.parked:
            if parked.done.done():
                parked.reply(parked.results[parked.tp])
            else:
                waiting.append(parked)
        self.parked = waiting


def _region_bytes(region: FileRegion | bytes) -> bytes:
    if isinstance(region, FileRegion):
        return os.pread(region.file.fileno(), region.size, region.position)
    return bytes(region)


def _only(answers: Mapping[TopicPartition, object], kind: type[T]) -> dict[TopicPartition, T]:
    return {tp: a for tp, a in answers.items() if isinstance(a, kind)}
