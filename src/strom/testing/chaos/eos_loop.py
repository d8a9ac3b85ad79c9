"""The exactly-once application of the consume-transform-produce workload, run as a process
of its own so that "kill the application" is a real kill -9 (see
:mod:`~strom.testing.chaos.eos_workload`, which starts, kills and replaces it)::

    python -m strom.testing.chaos.eos_loop BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID NAME \\
        [--instance-id ID] [--batch 20] [--abort-ratio 0.1] [--seed 0] [--partitions 3]

A read_committed consumer in ``GROUP`` (static member ``ID`` when given, no auto-commit)
subscribed to ``INPUT``, and a transactional producer ``TRANSACTIONAL_ID`` (``acks=all``).
Each transaction takes up to ``--batch`` consumed inputs, writes one output per input —
value ``<input value>@<transaction name>`` to partition ``input partition % --partitions`` of
``OUTPUT`` — and sends the consumer's next offsets with its group metadata
(``send_offsets_to_transaction``). A seeded fraction (``--abort-ratio``) is aborted on purpose
after its outputs reached the brokers. After any abort the loop rewinds every assigned
partition to the group's committed offset (OffsetFetch), as an application must: the
consumer's position is past the inputs whose outputs were just thrown away. A fatal producer
error (fenced, a lost producer state) replaces the producer (its ``init_transactions`` fences
the old one and aborts what it left open), then rewinds.

History on stdout, one JSON object per line, flushed before the step it describes runs (so
whatever a killed process did is in the pipe): ``{"op": "invoke", "id": n, "f": …, "value":
…}``, ``{"op": "complete", "id": n, "type": "ok"|"fail"|"info", "value": …}`` and
``{"op": "event", "type": …, "f": …, "value": …}``. Operations:

* ``txn`` — invoke value: ``txn`` (``NAME-<n>``, unique across incarnations), ``records``
  (``[output partition, output value]`` in produce order), ``inputs`` (``[partition, offset,
  value]``), ``offsets`` (``[partition, next offset]`` sent to the transaction), ``intent``;
  completed ``ok`` (``commit_transaction`` returned), ``fail`` (aborted before any commit was
  requested: on purpose, or after an error), ``info`` (a commit attempt that raised: outcome
  unknown); no completion when the process was killed first (unknown as well);
* ``committing`` (event) — ``commit_transaction`` is about to be called;
* ``init`` — ``init_transactions`` (ok / info); ``rewind`` — the committed offsets read back
  (``offsets``) and sought to (ok), or the error (info);
* ``assigned`` / ``revoked`` (events) — the group's assignment; ``producer-replaced`` (event).

``STROM_EOS_DEBUG=eos,cgrp,protocol`` (librdkafka's debug contexts) logs both clients'
debug lines to stderr. A client call that blocks :data:`STUCK_AFTER_S` past its start
(librdkafka#5511, see :class:`Watchdog`) ends the process with exit code :data:`STUCK_EXIT`
after a ``stuck`` event (the open transaction completed ``fail``, or ``info`` if its commit
was requested); the supervisor starts the next incarnation. SIGTERM ends the loop between
transactions: the consumer is closed and the process exits 0. SIGUSR1 dumps every thread's
stack on stderr (the supervisor does before it kills a loop that did not stop).
"""

from __future__ import annotations

import argparse
import faulthandler
import functools
import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from strom.testing.chaos.workload import FAST_RECONNECT

#: how long one transactional call may keep being retried before its outcome is given up.
CALL_DEADLINE_S = 30.0
#: a client call that has not returned this long after its own 10 s timeout is stuck.
STUCK_AFTER_S = 20.0
#: the exit code of an incarnation that ended a stuck call (see :class:`Watchdog`).
STUCK_EXIT = 3
#: librdkafka ``debug`` contexts for both clients, logged to stderr (post-mortems).
DEBUG_ENV = "STROM_EOS_DEBUG"
#: transaction.timeout.ms: long enough to outlive a coordinator's failover.
TRANSACTION_TIMEOUT_MS = 30000


class HistoryOut:
    """The history lines on a text stream (see the module docstring); one writer thread."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._next = 0
        self._lock = threading.Lock()

    def _write(self, line: Mapping[str, Any]) -> None:
        with self._lock:
            self._out.write(json.dumps(line, sort_keys=True) + "\n")
            self._out.flush()

    def invoke(self, f: str, value: Mapping[str, Any]) -> int:
        with self._lock:
            op_id, self._next = self._next, self._next + 1
        self._write({"op": "invoke", "id": op_id, "f": f, "value": dict(value)})
        return op_id

    def complete(self, op_id: int, type_: str, value: Mapping[str, Any]) -> None:
        self._write({"op": "complete", "id": op_id, "type": type_, "value": dict(value)})

    def event(self, type_: str, f: str, value: Mapping[str, Any]) -> None:
        self._write({"op": "event", "type": type_, "f": f, "value": dict(value)})


class Stopped(Exception):
    """SIGTERM arrived while a call was being retried."""


class Watchdog:
    """Ends the process when one client call blocks far past its own timeout.

    librdkafka's ``send_offsets_to_transaction`` can block for good once the group
    coordinator it cached has left the metadata (a killed broker whose registration
    expired: librdkafka decommissions it, and its coordinator lookup then waits for a broker
    state change that may never come — confluentinc/librdkafka#5511), whatever timeout it
    was given. An application cannot interrupt the call; it can only exit and be restarted,
    which this does: ``on_fire`` records what is known, then the process exits with
    :data:`STUCK_EXIT`."""

    def __init__(self, on_fire: Any) -> None:
        self._on_fire = on_fire
        self._lock = threading.Lock()
        self._armed: tuple[str, float] | None = None
        threading.Thread(target=self._run, name="eos-watchdog", daemon=True).start()

    def arm(self, call: str, seconds: float = STUCK_AFTER_S) -> None:
        with self._lock:
            self._armed = (call, time.monotonic() + seconds)

    def disarm(self) -> None:
        with self._lock:
            self._armed = None

    def _run(self) -> None:
        while True:
            time.sleep(0.5)
            with self._lock:
                armed = self._armed
            if armed is not None and time.monotonic() > armed[1]:
                self._on_fire(armed[0])
                os._exit(STUCK_EXIT)


class EosLoop:
    """One incarnation of the application (module docstring); one thread."""

    def __init__(self, args: argparse.Namespace, out: HistoryOut) -> None:
        self.args, self.out = args, out
        self.name = str(args.name)
        self.random = random.Random(f"{args.seed}-{args.name}")
        self.stop = threading.Event()
        self.count = 0
        self.producer: Producer | None = None
        consumer_config: dict[str, Any] = {
            "bootstrap.servers": args.bootstrap, "group.id": args.group,
            "enable.auto.commit": False, "isolation.level": "read_committed",
            "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
            "client.id": f"eos-{self.name}", **FAST_RECONNECT, **_debug()}
        if args.group_protocol == "consumer":  # KIP-848: timings are the broker's
            consumer_config["group.protocol"] = "consumer"
        else:
            consumer_config.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        if args.instance_id:
            consumer_config["group.instance.id"] = args.instance_id
        self.consumer = Consumer(consumer_config)
        self.assignment: set[int] = set()
        #: the open transaction's op id, and whether its commit was requested
        self.txn_op: int | None = None
        self.committing = False
        self.watchdog = Watchdog(self._stuck)

    def _stuck(self, call: str) -> None:
        """The watchdog fires: the open transaction (if any) cannot have committed unless
        its commit was requested."""
        self.out.event("info", "stuck", {"call": call})
        if self.txn_op is not None:
            self.out.complete(self.txn_op, "info" if self.committing else "fail",
                              {"outcome": "unknown" if self.committing else "aborted",
                               "reason": f"stuck in {call}"})

    def _call(self, name: str, call: Any) -> Any:
        """One blocking client call under the watchdog."""
        self.watchdog.arm(name)
        try:
            return call()
        finally:
            self.watchdog.disarm()

    # -- set-up ------------------------------------------------------------------------------
    def _new_producer(self) -> None:
        """A producer with the transactional id, ``init_transactions`` retried until it
        answers (the coordinator may be moving); it fences any earlier holder of the id."""
        producer = Producer({
            "bootstrap.servers": self.args.bootstrap,
            "transactional.id": self.args.transactional_id, "acks": "all", "linger.ms": 5,
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS, "client.id": f"eos-{self.name}",
            **FAST_RECONNECT, **_debug()})
        op = self.out.invoke("init", {"transactional_id": self.args.transactional_id})
        while True:
            try:
                self._call("init_transactions", lambda: producer.init_transactions(10))
                break
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if self.stop.is_set() or (error.fatal() and not error.retriable()):
                    self.out.complete(op, "info", {"error": error.name()})
                    raise
                time.sleep(0.2)
        self.out.complete(op, "ok", {})
        self.producer = producer

    def _assigned(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assignment = {int(tp.partition) for tp in partitions}
        self.out.event("ok", "assigned", {"partitions": sorted(self.assignment)})

    def _revoked(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = {int(tp.partition) for tp in partitions}
        self.assignment -= revoked
        self.out.event("ok", "revoked", {"partitions": sorted(revoked)})

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> int:
        self._new_producer()
        self.consumer.subscribe([self.args.input], on_assign=self._assigned,
                                on_revoke=self._revoked)
        try:
            while not self.stop.is_set():
                messages = self._take()
                if messages:
                    self._transaction(messages)
        except Stopped:
            pass
        finally:
            self._call("close", self.consumer.close)
        return 0

    def _take(self, wait: float = 0.3) -> list[Any]:
        """Up to ``--batch`` inputs, waiting at most ``wait`` seconds for a full batch."""
        taken: list[Any] = []
        deadline = time.monotonic() + wait
        while len(taken) < self.args.batch and not self.stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            taken += [m for m in self.consumer.consume(self.args.batch - len(taken), left)
                      if m.error() is None]
        return taken

    def _transaction(self, messages: Sequence[Any]) -> None:
        txn = f"{self.name}-{self.count}"
        self.count += 1
        inputs = [(int(m.partition()), int(m.offset()), m.value().decode()) for m in messages]
        records = [(p % self.args.partitions, f"{value}@{txn}") for p, _o, value in inputs]
        offsets: dict[int, int] = {}
        for p, offset, _v in inputs:
            offsets[p] = max(offsets.get(p, 0), offset + 1)
        abort = self.random.random() < self.args.abort_ratio
        op = self.out.invoke("txn", {
            "txn": txn, "records": [list(r) for r in records],
            "inputs": [list(i) for i in inputs], "offsets": sorted(offsets.items()),
            "intent": "abort" if abort else "commit"})
        self.txn_op, self.committing = op, False
        try:
            self._run_transaction(op, records, offsets, abort)
        finally:
            self.txn_op = None

    def _run_transaction(self, op: int, records: Sequence[tuple[int, str]],
                         offsets: Mapping[int, int], abort: bool) -> None:
        producer = self.producer
        assert producer is not None
        try:
            producer.begin_transaction()
            for partition, value in records:
                self._produce(partition, value)
            group = self.consumer.consumer_group_metadata()
            sent = [TopicPartition(self.args.input, p, o) for p, o in sorted(offsets.items())]
            self._retry("send_offsets_to_transaction",
                        lambda: producer.send_offsets_to_transaction(sent, group, 10))
        except KafkaException as exc:
            self._aborted(op, exc.args[0])
            return
        if abort:
            # the outputs reach the partitions first, so the abort has something to hide
            self._call("flush", lambda: producer.flush(10))
            self._aborted(op, None)
            return
        self._commit(op)

    def _produce(self, partition: int, value: str) -> None:
        assert self.producer is not None
        while True:
            try:
                self.producer.produce(self.args.output, value=value.encode(),
                                      partition=partition)
                self.producer.poll(0)
                return
            except BufferError:
                self.producer.poll(0.1)

    def _retry(self, name: str, call: Any) -> None:
        """``call`` again while it raises a retriable error, up to :data:`CALL_DEADLINE_S`
        (librdkafka's contract for the transactional calls), each attempt under the
        watchdog."""
        deadline = time.monotonic() + CALL_DEADLINE_S
        while True:
            try:
                self._call(name, call)
                return
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if not error.retriable() or error.txn_requires_abort() or error.fatal() \
                        or time.monotonic() > deadline:
                    raise
                if self.stop.is_set():
                    raise Stopped() from exc
                time.sleep(0.05)

    def _commit(self, op: int) -> None:
        assert self.producer is not None
        producer = self.producer
        self.out.event("ok", "committing", {"txn": f"{self.name}-{self.count - 1}"})
        self.committing = True
        try:
            self._retry("commit_transaction", lambda: producer.commit_transaction(10))
        except KafkaException as exc:
            # EndTxn(commit) may have reached the coordinator: the outcome is unknown
            error: KafkaError = exc.args[0]
            self.out.complete(op, "info", {"error": error.name(), "stage": "commit"})
            self.txn_op = None
            self._recover(error)
            return
        self.out.complete(op, "ok", {"outcome": "committed"})
        self.txn_op = None

    def _aborted(self, op: int, error: KafkaError | None) -> None:
        """The transaction ends before any commit was requested: it cannot commit."""
        reason = "intended" if error is None else error.name()
        self.out.complete(op, "fail", {"outcome": "aborted", "reason": reason})
        self.txn_op = None
        self._recover(error)

    def _recover(self, error: KafkaError | None) -> None:
        """Abort what is open (or replace a fatal producer), then rewind to the committed
        offsets."""
        assert self.producer is not None
        producer = self.producer
        if error is not None and error.fatal():
            self._replace(error)
        else:
            try:
                self._retry("abort_transaction", lambda: producer.abort_transaction(10))
            except KafkaException as exc:
                self._replace(exc.args[0])
        self._rewind()

    def _replace(self, error: KafkaError) -> None:
        self.out.event("info", "producer-replaced", {"error": error.name()})
        self.producer = None
        self._new_producer()

    def _rewind(self) -> None:
        """Seek every assigned partition to the group's committed offset (the start of the
        earliest input whose transaction did not commit)."""
        deadline = time.monotonic() + CALL_DEADLINE_S
        op = self.out.invoke("rewind", {"partitions": sorted(self.assignment)})
        while True:
            tps = [TopicPartition(self.args.input, p) for p in sorted(self.assignment)]
            try:
                committed = (self._call("committed", functools.partial(
                    self.consumer.committed, tps, timeout=10)) if tps else [])
                for tp in committed:
                    # no committed offset yet: the beginning (auto.offset.reset=earliest)
                    self.consumer.seek(TopicPartition(tp.topic, tp.partition,
                                                      max(int(tp.offset), 0)))
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if time.monotonic() > deadline or self.stop.is_set():
                    self.out.complete(op, "info", {"error": error.name()})
                    raise SystemExit(f"{self.name}: cannot rewind: {error.name()}") from exc
                time.sleep(0.2)
                continue
            self.out.complete(op, "ok", {"offsets": sorted(
                (int(tp.partition), int(tp.offset)) for tp in committed)})
            return


def _debug() -> dict[str, Any]:
    """librdkafka's ``debug`` contexts from ``STROM_EOS_DEBUG`` (e.g. ``eos,cgrp,protocol``),
    for post-mortems: its own log callback then writes them to stderr from its threads as
    they happen (through Python's ``logger`` they would wait for the next poll)."""
    contexts = os.environ.get(DEBUG_ENV, "")
    return {"debug": contexts, "logger": None} if contexts else {}


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("bootstrap", "input", "output", "group", "transactional_id", "name"):
        parser.add_argument(name)
    parser.add_argument("--instance-id", default="")
    parser.add_argument("--group-protocol", default="classic", choices=("classic", "consumer"))
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--abort-ratio", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--partitions", type=int, default=3, help="output partitions")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    loop = EosLoop(args, HistoryOut(sys.stdout))
    signal.signal(signal.SIGTERM, lambda _sig, _frame: loop.stop.set())
    faulthandler.register(signal.SIGUSR1)  # a stack dump on stderr, for a stuck loop
    return loop.run()


if __name__ == "__main__":
    sys.exit(main())
