"""The queue workload against a real cluster, through confluent-kafka (librdkafka):

- :class:`ProducerWorker`: an idempotent producer (``acks=all``) sending unique values
  (``<name>-<n>``, also the key, so they spread over partitions) at a steady rate; each send
  is an ``invoke`` in the history and its delivery report the completion: ``ok`` with
  partition and offset, or the error. Only errors that prove nothing left the client
  (:data:`DEFINITE_FAILURES`: purged from the queue, refused by ``produce()``) are ``fail``;
  every other error is ``info`` (a retried batch may have been written before it failed).
- :class:`ReaderWorker`: a consumer assigned every partition from the beginning that records
  each record it sees during the run (``poll`` events: value, partition, offset). A consumer
  only sees records below the high watermark, so all of them must survive.
- :func:`read_all`: after the run, every partition read from the beginning to its end
  (``read_uncommitted``), as the checker's final reads.

Threads: each worker owns one client and one thread; the history is the only shared state.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from strom.testing.chaos.history import History, Op, OpType
from strom.testing.chaos.model import ReadRecord

#: librdkafka errors that mean the record was never sent to a broker.
DEFINITE_FAILURES = frozenset({"_PURGE_QUEUE", "_MSG_SIZE_TOO_LARGE", "_UNKNOWN_TOPIC",
                               "_UNKNOWN_PARTITION", "_INVALID_ARG"})
#: librdkafka's own log lines (a line per refused reconnect during a fault): kept out of
#: stderr unless the application configures logging for them.
LIBRDKAFKA_LOG = logging.getLogger("strom.testing.chaos.librdkafka")
LIBRDKAFKA_LOG.addHandler(logging.NullHandler())
#: client settings that make librdkafka notice restarted brokers quickly.
FAST_RECONNECT = {"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
                  "topic.metadata.refresh.interval.ms": 1000, "socket.timeout.ms": 10000,
                  # librdkafka's log (a line per refused reconnect) goes to logging, not stderr
                  "logger": LIBRDKAFKA_LOG}


def create_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int,
                 config: Mapping[str, str] | None = None, timeout: float = 30.0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, partitions, replication_factor, config=dict(config or {}))
    admin.create_topics([new])[topic].result(timeout)


class ProducerWorker:
    """One idempotent, acks=all producer thread; ``rate`` sends per second."""

    def __init__(self, name: str, bootstrap: str, topic: str, history: History, *,
                 rate: float = 200.0, message_timeout_ms: int = 30000,
                 config: Mapping[str, Any] | None = None) -> None:
        self.name, self.topic, self.history, self.rate = name, topic, history, rate
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "message.timeout.ms": message_timeout_ms,
            "client.id": f"chaos-{name}", **FAST_RECONNECT, **dict(config or {})})
        self._pending: dict[int, Op] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"chaos-{name}", daemon=True)
        self.sent = 0
        #: the fatal error that stopped this producer, if one did.
        self.fatal: str | None = None

    def start(self) -> ProducerWorker:
        self._thread.start()
        return self

    def _report(self, op: Op, err: KafkaError | None, msg: Any) -> None:
        with self._lock:
            self._pending.pop(op.index, None)
        if err is None:
            self.history.complete(op, "ok", {"partition": msg.partition(),
                                             "offset": msg.offset()})
        else:
            kind: OpType = "fail" if err.name() in DEFINITE_FAILURES else "info"
            self.history.complete(op, kind, {"error": err.name(), "code": err.code()})

    def _send_one(self) -> None:
        value = f"{self.name}-{self.sent}"
        self.sent += 1
        op = self.history.invoke(self.name, "send", {"value": value, "topic": self.topic})
        with self._lock:
            self._pending[op.index] = op
        def report(err: KafkaError | None, msg: Any) -> None:
            self._report(op, err, msg)

        try:
            self.producer.produce(self.topic, value=value.encode(), key=value.encode(),
                                  on_delivery=report)
        except (BufferError, KafkaException) as exc:  # not queued: certainly not sent
            with self._lock:
                self._pending.pop(op.index, None)
            self.history.complete(op, "fail", {"error": type(exc).__name__})
            if isinstance(exc, KafkaException) and exc.args and exc.args[0].fatal():
                raise
            self.producer.poll(0.05)

    def _run(self) -> None:
        interval = 1.0 / self.rate
        next_send = time.monotonic()
        while not self._stop.is_set():
            try:
                self._send_one()
                self.producer.poll(0)
            except KafkaException as exc:
                # a fatal error (e.g. OUT_OF_ORDER_SEQUENCE_NUMBER after a lost tail): this
                # producer can send no more; its outstanding sends are reported at stop()
                self.fatal = exc.args[0].name() if exc.args else repr(exc)
                self.history.event(self.name, "info", "producer-fatal", {"error": self.fatal})
                return
            next_send += interval
            delay = next_send - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            else:
                next_send = time.monotonic()

    def stop(self, flush_timeout: float = 30.0) -> None:
        """Stop sending, wait up to ``flush_timeout`` for outstanding reports; what is still
        outstanding is purged (its reports arrive as ``_PURGE_*``) and anything left is
        completed as ``info``."""
        self._stop.set()
        self._thread.join()
        try:
            self.producer.flush(flush_timeout)
            self.producer.purge()
            self.producer.flush(5)
        except KafkaException:
            pass  # a fatal producer: what it did not report stays unknown below
        with self._lock:
            left = list(self._pending.values())
            self._pending.clear()
        for op in left:
            self.history.complete(op, "info", {"error": "unreported"})


#: Broker answers that say the record was not appended (Kafka refuses before the append).
_REFUSED = frozenset({"NOT_ENOUGH_REPLICAS"})


def probe_send(bootstrap: str, topic: str, partition: int, timeout: float = 15.0,
               history: History | None = None, value: str = "probe") -> str | None:
    """One ``acks=all`` send of ``value`` with no retries (and no idempotence, whose retries
    would hide the broker's answer): the error name the broker answered (e.g.
    ``NOT_ENOUGH_REPLICAS``), None when it was acknowledged. With ``history`` the send is
    recorded like a workload's send (``value`` must then be unique): ``ok``, ``fail`` for a refusal
    before the append (NOT_ENOUGH_REPLICAS: the checker then flags the value if it is ever
    read), ``info`` otherwise (NOT_ENOUGH_REPLICAS_AFTER_APPEND: written, not acknowledged)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0,
                         "enable.idempotence": False, "message.timeout.ms": int(timeout * 1000),
                         **FAST_RECONNECT})
    outcome: list[tuple[KafkaError | None, Any]] = []
    op = (history.invoke("probe", "send", {"value": value, "topic": topic})
          if history is not None else None)

    def report(err: KafkaError | None, msg: Any) -> None:
        outcome.append((err, msg))

    producer.produce(topic, value.encode(), partition=partition, on_delivery=report)
    producer.flush(timeout + 5)
    if not outcome:
        if history is not None and op is not None:
            history.complete(op, "info", {"error": "no delivery report"})
        raise TimeoutError("the probe send got no delivery report")
    err, msg = outcome[0]
    if history is not None and op is not None:
        if err is None:
            history.complete(op, "ok", {"partition": msg.partition(), "offset": msg.offset()})
        else:
            kind: OpType = ("fail" if err.name() in DEFINITE_FAILURES | _REFUSED else "info")
            history.complete(op, kind, {"error": err.name(), "code": err.code()})
    return None if err is None else err.name()


def _consumer(bootstrap: str, name: str, config: Mapping[str, Any] | None = None) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"chaos-{name}-{uuid.uuid4()}",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "isolation.level": "read_uncommitted", "client.id": f"chaos-{name}",
                     **FAST_RECONNECT, **dict(config or {})})


class ReaderWorker:
    """A consumer thread recording every record it sees as a ``poll`` event (with the
    consumer's ``isolation`` level; ``config`` overrides the consumer's settings)."""

    def __init__(self, name: str, bootstrap: str, topic: str, partitions: Iterable[int],
                 history: History, config: Mapping[str, Any] | None = None) -> None:
        self.name, self.history = name, history
        self.consumer = _consumer(bootstrap, name, config)
        self.isolation = str((config or {}).get("isolation.level", "read_uncommitted"))
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"chaos-{name}", daemon=True)
        self.seen = 0

    def start(self) -> ReaderWorker:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            for msg in self.consumer.consume(500, 0.2):
                if msg.error() is not None:
                    continue
                self.seen += 1
                record = _read_record(msg)
                self.history.event(self.name, "ok", "poll", {
                    "value": record.value, "partition": record.partition,
                    "offset": record.offset, "isolation": self.isolation})

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.consumer.close()


def read_all(bootstrap: str, topic: str, partitions: Iterable[int],
             timeout: float = 60.0) -> dict[int, list[ReadRecord]]:
    """Every record of each partition, from the beginning to the high watermark as it is when
    the read starts (the workload must be stopped)."""
    wanted = list(partitions)
    consumer = _consumer(bootstrap, "final-read")
    deadline = time.monotonic() + timeout
    try:
        ends = {p: _high_watermark(consumer, topic, p, deadline) for p in wanted}
        result: dict[int, list[ReadRecord]] = {p: [] for p in wanted}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in wanted])
        position = dict.fromkeys(wanted, 0)
        while any(position[p] < ends[p] for p in wanted):
            if time.monotonic() > deadline:
                short = {p: (position[p], ends[p]) for p in wanted if position[p] < ends[p]}
                raise TimeoutError(f"final read incomplete (position, end): {short}")
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is not None:
                    continue
                record = _read_record(msg)
                result[record.partition].append(record)
                position[record.partition] = record.offset + 1
        return result
    finally:
        consumer.close()


def _read_record(msg: Any) -> ReadRecord:
    value = msg.value()
    text = value.decode("utf-8", errors="replace") if isinstance(value, bytes) else ""
    return ReadRecord(int(msg.partition()), int(msg.offset()), text)


def _high_watermark(consumer: Consumer, topic: str, partition: int, deadline: float) -> int:
    while True:
        try:
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                        timeout=5)
            return int(high)
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
