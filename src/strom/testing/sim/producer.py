"""Simulated idempotent producers (acks=all, one request in flight) recording a history.

Each producer sends unique values ``p<i>-<n>``, one at a time, to a seeded partition: every
value is one batch stamped with the producer id, epoch 0 and that partition's next sequence
(sequences are per partition, as in Kafka). It sends to the leader named by the store's
current image (its metadata), retries the *same* batch (same sequence: the leader's producer
state turns a duplicate into the first append's offset) after ``backoff_ms`` on an error or no
answer within ``request_timeout_ms``, and gives up after ``delivery_timeout_ms``. Every send
has a request id unique within the producer, and an answer counts only for the latest request
(a real client matches answers by correlation id: a late answer to an earlier value's request
is never taken for this one's). History: ``invoke`` when a value is first sent,
``ok`` with partition and offset on success, plus what only a simulation can know,
taken when the leader answered: ``holders`` (the brokers whose log then held the value at
that offset) and ``leader_isr`` (the leader's own ISR then, which may be larger than the
store's when the leader is cut from the store), ``info`` when it gave up (the value may or may
not be in the log). A producer that gave up, or got OUT_OF_ORDER_SEQUENCE_NUMBER /
UNKNOWN_PRODUCER_ID, continues with a fresh producer id (as a producer bumping its epoch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from strom.common.errors import error_class
from strom.common.types import TopicPartition
from strom.protocol.records.builder import BatchBuilder
from strom.replication.delayed import PartitionAppendResult
from strom.testing.chaos.history import Op

if TYPE_CHECKING:
    from strom.testing.sim.broker import SimBroker
    from strom.testing.sim.cluster import Simulation

FATAL = {error_class("OUT_OF_ORDER_SEQUENCE_NUMBER").code,
         error_class("UNKNOWN_PRODUCER_ID").code}


@dataclass(slots=True)
class Attempt:
    value: str
    tp: TopicPartition
    batch: bytes
    invoke: Op
    deadline_ms: int
    attempt: int = 0  # the producer's request id of the latest send of this value


class SimProducer:
    """See the module docstring. Node id ``-1 - index`` on the network."""

    def __init__(self, sim: Simulation, index: int) -> None:
        self.sim = sim
        self.index = index
        self.node = -1 - index
        self.name = f"producer-{index}"
        self.producer_id = sim.next_producer_id()
        self.sequences: dict[int, int] = {}  # partition → next sequence
        self.sent = 0
        self.requests = 0  # request ids, unique per producer (a connection's correlation ids)
        self.current: Attempt | None = None

    def start(self) -> None:
        self._schedule_next()

    def _schedule_next(self) -> None:
        self.sim.scheduler.call_later(self.sim.rng.randint(5, 40), self._next)

    def _next(self) -> None:
        if self.current is not None:
            return
        if self.sim.clock.now_ms() >= self.sim.workload_end_ms:
            return
        value = f"p{self.index}-{self.sent}"
        self.sent += 1
        tp = TopicPartition(self.sim.topic, self.sim.rng.randrange(self.sim.partitions))
        builder = BatchBuilder()
        builder.append(self.sim.clock.now_ms(), None, value.encode())
        sequence = self.sequences.get(tp.partition, 0)
        builder.set_producer_state(self.producer_id, 0, sequence, False)
        self.sequences[tp.partition] = sequence + 1
        invoke = self.sim.history.invoke(self.name, "send", {"value": value})
        self.current = Attempt(value, tp, builder.build(), invoke,
                               self.sim.clock.now_ms() + self.sim.delivery_timeout_ms)
        self._send()

    def _send(self) -> None:
        current = self.current
        assert current is not None
        if self.sim.clock.now_ms() >= current.deadline_ms:
            self._finish(None)
            return
        self.requests += 1
        current.attempt = attempt = self.requests
        image = self.sim.store_node.store.image
        topic = image.topics.get(current.tp.topic)
        leader = topic.partitions[current.tp.partition].leader if topic else -1
        if leader < 0:
            self._retry_later(attempt)
            return
        broker = self.sim.brokers[leader]

        def reply(result: PartitionAppendResult) -> None:
            witness = self._witness(broker, current, result) if result.error is None else {}
            self.sim.net.send(leader, self.node,
                              lambda: self._answered(attempt, result, witness))

        self.sim.net.send(self.node, leader, lambda: broker.produce(current.tp, current.batch,
                                                                    reply))
        self.sim.scheduler.call_later(self.sim.request_timeout_ms,
                                      lambda: self._retry(attempt))

    def _witness(self, broker: SimBroker, current: Attempt,
                 result: PartitionAppendResult) -> dict[str, list[int]]:
        """At the moment the leader acknowledges: the brokers whose log holds the value at
        the acknowledged offset, and the leader's own (committed) ISR."""
        assert broker.replicas is not None
        partition = broker.replicas.partition(current.tp)
        return {"holders": self.sim.holders(current.tp.partition, result.base_offset,
                                            current.value),
                "leader_isr": sorted(partition.isr) if partition is not None else []}

    def _retry_later(self, attempt: int) -> None:
        self.sim.scheduler.call_later(self.sim.backoff_ms, lambda: self._retry(attempt))

    def _retry(self, attempt: int) -> None:
        if self.current is not None and self.current.attempt == attempt:
            self._send()

    def _answered(self, attempt: int, result: PartitionAppendResult,
                  witness: Mapping[str, list[int]]) -> None:
        current = self.current
        if current is None or current.attempt != attempt:
            return  # a late answer to a request already retried (maybe for an earlier value)
        if result.error is None:
            self._finish(result.base_offset, witness)
        elif result.error.code in FATAL:
            self._finish(None)
        else:
            self._retry_later(attempt)

    def _finish(self, offset: int | None, witness: Mapping[str, list[int]] | None = None
                ) -> None:
        current = self.current
        assert current is not None
        self.current = None
        if offset is None:
            self.sim.history.complete(current.invoke, "info", {"error": "gave up"})
            self.producer_id = self.sim.next_producer_id()
            self.sequences = {}
        else:
            self.sim.history.complete(current.invoke, "ok", {
                "partition": current.tp.partition, "offset": offset, **(witness or {})})
        self._schedule_next()
