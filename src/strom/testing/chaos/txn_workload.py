"""The transactional workload, through confluent-kafka (librdkafka):

- :class:`TxnProducerWorker`: a transactional producer (``acks=all``, idempotent) running one
  transaction after another, each writing ``records`` records round-robin over the topic's
  partitions (so a transaction touches partitions led by different brokers and its markers go
  to brokers other than the coordinator), committing most and aborting a seeded fraction.
  Each transaction is one ``txn`` operation in the history — invoke with ``txn`` (its name)
  and ``records`` (``[partition, value]`` in produce order), then ``ok`` (committed),
  ``fail`` (aborted before any commit was requested) or ``info`` (outcome unknown: a commit
  attempt that raised, a fatal error); a ``committing`` event marks the moment
  ``commit_transaction`` is called (faults aimed "mid-commit" wait for it). After a fatal
  error (fenced, a lost producer state) the worker builds a new producer with the same
  transactional id, as an application would.
- :func:`read_committed_all`: after the run, every partition read from the beginning with
  ``isolation.level=read_committed`` up to its last stable offset, once that offset has
  reached the high watermark (every transaction resolved); partitions where it does not
  within the timeout are returned as stuck.

Readers during the run are :class:`~strom.testing.chaos.workload.ReaderWorker` with the
isolation level in their config. Threads: each worker owns one client and one thread.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from strom.testing.chaos.history import History, Op
from strom.testing.chaos.model import ReadRecord
from strom.testing.chaos.workload import FAST_RECONNECT

#: how long one transaction may take to commit before its outcome is called unknown.
COMMIT_DEADLINE_S = 30.0


class TxnProducerWorker:
    """One transactional producer thread (see the module docstring)."""

    def __init__(self, name: str, bootstrap: str, topic: str, partitions: Sequence[int],
                 history: History, *, seed: int = 0, records: int = 6,
                 abort_ratio: float = 0.2, pause: float = 0.02,
                 transaction_timeout_ms: int = 10000,
                 config: Mapping[str, Any] | None = None) -> None:
        self.name, self.topic, self.history = name, topic, history
        self.partitions, self.records = list(partitions), records
        self.abort_ratio, self.pause = abort_ratio, pause
        self.transactional_id = f"chaos-{name}"
        self._config = {
            "bootstrap.servers": bootstrap, "transactional.id": self.transactional_id,
            "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "transaction.timeout.ms": transaction_timeout_ms,
            "client.id": f"chaos-{name}", **FAST_RECONNECT, **dict(config or {})}
        self.random = random.Random(f"{seed}-{name}")
        self.producer: Producer | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"chaos-{name}", daemon=True)
        self.count = 0
        #: fatal errors this worker recovered from by building a new producer.
        self.fatal: list[str] = []

    def start(self) -> TxnProducerWorker:
        self._thread.start()
        return self

    def stop(self, timeout: float = 60.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    # -- the loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.producer is None and not self._init():
                continue
            self._one_transaction()
            self._stop.wait(self.pause)

    def _init(self) -> bool:
        """A new producer with the transactional id, its InitProducerId retried until it
        answers (the coordinator may be moving)."""
        producer = Producer(self._config)
        while not self._stop.is_set():
            try:
                producer.init_transactions(10)
                self.producer = producer
                return True
            except KafkaException as exc:
                error = exc.args[0]
                if error.fatal():
                    self.history.event(self.name, "info", "producer-fatal",
                                       {"error": error.name(), "stage": "init"})
                    return False
                self._stop.wait(0.2)  # retriable (timed out): InitProducerId again
        return False

    def _one_transaction(self) -> None:
        assert self.producer is not None
        txn = f"{self.name}-{self.count}"
        self.count += 1
        records: list[tuple[int, str]] = [
            (self.partitions[i % len(self.partitions)], f"{txn}-{i}")
            for i in range(self.records)]
        abort = self.random.random() < self.abort_ratio
        op = self.history.invoke(self.name, "txn", {"txn": txn,
                                                    "records": [list(r) for r in records],
                                                    "intent": "abort" if abort else "commit"})
        try:
            self.producer.begin_transaction()
            for partition, value in records:
                self._produce(partition, value)
        except KafkaException as exc:
            self._abort(op, exc.args[0])
            return
        if abort:
            # the records reach the partitions first, so the abort has something to hide
            # (librdkafka would drop records still queued)
            self.producer.flush(10)
            self._abort(op, None)
        else:
            self._commit(op)

    def _produce(self, partition: int, value: str) -> None:
        assert self.producer is not None
        while True:
            try:
                self.producer.produce(self.topic, value=value.encode(), partition=partition)
                self.producer.poll(0)
                return
            except BufferError:
                self.producer.poll(0.1)

    def _commit(self, op: Op) -> None:
        assert self.producer is not None
        self.history.event(self.name, "ok", "committing", {"txn": op.value["txn"]})
        deadline = time.monotonic() + COMMIT_DEADLINE_S
        while True:
            try:
                self.producer.commit_transaction(10)
                self.history.complete(op, "ok", {"outcome": "committed"})
                return
            except KafkaException as exc:
                error = exc.args[0]
                if error.retriable() and time.monotonic() < deadline:
                    continue  # librdkafka: a retriable commit is called again
                self._after_commit_error(op, error)
                return

    def _after_commit_error(self, op: Op, error: KafkaError) -> None:
        """A commit that raised may or may not have committed: ``info``. Abort what can be
        aborted so the producer goes on; a fatal producer is replaced."""
        self.history.complete(op, "info", {"error": error.name(), "stage": "commit"})
        if error.txn_requires_abort():
            self._try_abort()
        elif error.fatal() or not error.retriable():
            self._replace(error)
        else:
            self._try_abort()

    def _abort(self, op: Op, error: KafkaError | None) -> None:
        """Abort before any commit was requested: the transaction certainly did not commit."""
        reason = "intended" if error is None else error.name()
        self.history.complete(op, "fail", {"outcome": "aborted", "reason": reason})
        if error is not None and error.fatal():
            self._replace(error)
            return
        self._try_abort()

    def _try_abort(self) -> None:
        assert self.producer is not None
        deadline = time.monotonic() + COMMIT_DEADLINE_S
        while True:
            try:
                self.producer.abort_transaction(10)
                return
            except KafkaException as exc:
                error = exc.args[0]
                if error.retriable() and time.monotonic() < deadline:
                    continue
                self._replace(error)
                return

    def _replace(self, error: KafkaError) -> None:
        """Drop a producer that cannot go on; the loop builds a new one (its InitProducerId
        fences this one and aborts whatever it left open)."""
        self.fatal.append(error.name())
        self.history.event(self.name, "info", "producer-replaced", {"error": error.name()})
        self.producer = None


def read_committed_all(bootstrap: str, topic: str, partitions: Iterable[int],
                       timeout: float = 60.0
                       ) -> tuple[dict[int, list[ReadRecord]], dict[int, list[ReadRecord]],
                                  list[int]]:
    """``(read_committed, read_uncommitted, stuck)``: each partition read from the beginning
    at both isolation levels (the workload must be stopped), read_uncommitted up to the high
    watermark. The read_committed read waits (up to ``timeout``) for the last stable offset to
    reach the high watermark, then reads to it; the partitions where it never did are
    ``stuck`` and read up to their LSO. A read ends where librdkafka reports the partition's
    end (a transaction's last offset is its marker, which no consumer returns)."""
    wanted = list(partitions)
    deadline = time.monotonic() + timeout
    with _eof_consumer(bootstrap, "read_uncommitted") as consumer:
        ends = {p: _end_offset(consumer, topic, p, -1, deadline) for p in wanted}
        uncommitted = _read_to(consumer, topic, ends, deadline)
    with _eof_consumer(bootstrap, "read_committed") as consumer:
        stable = {p: _end_offset(consumer, topic, p, ends[p], deadline) for p in wanted}
        stuck = [p for p in wanted if stable[p] < ends[p]]
        return _read_to(consumer, topic, stable, deadline), uncommitted, stuck


@contextlib.contextmanager
def _eof_consumer(bootstrap: str, isolation: str) -> Iterator[Consumer]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"chaos-final-{uuid.uuid4()}",
        "enable.auto.commit": False, "isolation.level": isolation,
        "enable.partition.eof": True, "client.id": f"chaos-final-{isolation}",
        **FAST_RECONNECT})
    try:
        yield consumer
    finally:
        consumer.close()


def _end_offset(consumer: Consumer, topic: str, partition: int, end: int,
                deadline: float) -> int:
    """The partition's end for the consumer's isolation level (high watermark, or LSO for
    read_committed), polled until it reaches ``end`` or the deadline passes."""
    stable = -1
    while True:
        with contextlib.suppress(KafkaException):
            _low, stable = consumer.get_watermark_offsets(
                KafkaTopicPartition(topic, partition), timeout=5)
        if stable >= end or time.monotonic() > deadline:
            return max(stable, 0)
        time.sleep(0.5)


def _read_to(consumer: Consumer, topic: str, stable: Mapping[int, int],
             deadline: float) -> dict[int, list[ReadRecord]]:
    """Read each partition until librdkafka reports its end at (or past) ``stable``."""
    result: dict[int, list[ReadRecord]] = {p: [] for p in stable}
    at_end = {p for p, offset in stable.items() if offset == 0}
    consumer.assign([KafkaTopicPartition(topic, p, OFFSET_BEGINNING) for p in stable
                     if p not in at_end])
    while at_end != set(stable):
        if time.monotonic() > deadline:
            raise TimeoutError(f"final read_committed read incomplete: "
                               f"{sorted(set(stable) - at_end)}")
        for msg in consumer.consume(1000, 0.5):
            error = msg.error()
            partition, offset = int(msg.partition() or 0), int(msg.offset() or 0)
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF and offset >= stable[partition]:
                    at_end.add(partition)
                continue
            value = msg.value()
            text = value.decode("utf-8", errors="replace") if isinstance(value, bytes) else ""
            result[partition].append(ReadRecord(partition, offset, text))
    return result
