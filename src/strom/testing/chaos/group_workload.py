"""The consumer-group workload, through confluent-kafka (librdkafka):

- :class:`GroupMemberWorker`: one member of a consumer group subscribed to a topic (fed by a
  :class:`~strom.testing.chaos.workload.ProducerWorker`), committing the position of each
  partition it consumed with a synchronous OffsetCommit every ``commit_interval`` seconds.
  Each commit is a ``commit`` operation: invoke with ``member`` and ``offsets``
  (``{partition: offset}``), completed ``ok`` (acknowledged; ``errors`` lists partitions the
  coordinator refused, which are not acknowledged), ``fail`` (refused before anything was
  written: the group had moved on — ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
  REBALANCE_IN_PROGRESS) or ``info`` (unknown: a timeout, a coordinator that moved while
  answering). Assignments and revocations are ``assigned`` / ``revoked`` events.
- :func:`committed_offsets`: the group's committed offsets (OffsetFetch) after the run.

Threads: each worker owns one consumer and one thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from strom.testing.chaos.history import History, OpType
from strom.testing.chaos.workload import FAST_RECONNECT

#: commit errors that mean the coordinator refused the commit before writing it (the last
#: two: a KIP-848 member's epoch moved on).
REFUSED = frozenset({"ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "REBALANCE_IN_PROGRESS",
                     "_NO_OFFSET", "FENCED_INSTANCE_ID", "_STATE", "STALE_MEMBER_EPOCH",
                     "FENCED_MEMBER_EPOCH"})


def _member_config(bootstrap: str, group: str, name: str,
                   protocol: str = "classic") -> dict[str, Any]:
    """A member's settings; a ``consumer`` (KIP-848) member takes its session timeout and
    heartbeat interval from the broker (librdkafka refuses them client side)."""
    timing: dict[str, Any] = ({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
                              if protocol == "classic" else {"group.protocol": protocol})
    return {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "client.id": f"chaos-{name}", **timing,
            **FAST_RECONNECT}


class GroupMemberWorker:
    """One group member thread (see the module docstring)."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, history: History,
                 *, commit_interval: float = 0.2,
                 config: Mapping[str, Any] | None = None, protocol: str = "classic") -> None:
        self.name, self.history, self.commit_interval = name, history, commit_interval
        self.consumer = Consumer({**_member_config(bootstrap, group, name, protocol),
                                  **dict(config or {})})
        self.topic = topic
        self._positions: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"chaos-{name}", daemon=True)
        self.acknowledged = 0

    def start(self) -> GroupMemberWorker:
        self.consumer.subscribe([self.topic], on_assign=self._assigned,
                                on_revoke=self._revoked)
        self._thread.start()
        return self

    def _assigned(self, _consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        self.history.event(self.name, "ok", "assigned",
                           {"member": self.name, "partitions": sorted(p.partition
                                                                      for p in partitions)})

    def _revoked(self, _consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        revoked = {p.partition for p in partitions}
        self._positions = {p: o for p, o in self._positions.items() if p not in revoked}
        self.history.event(self.name, "ok", "revoked",
                           {"member": self.name, "partitions": sorted(revoked)})

    def _run(self) -> None:
        next_commit = time.monotonic() + self.commit_interval
        while not self._stop.is_set():
            for msg in self.consumer.consume(200, 0.1):
                if msg.error() is None:
                    self._positions[int(msg.partition() or 0)] = int(msg.offset() or 0) + 1
            if time.monotonic() >= next_commit:
                self._commit()
                next_commit = time.monotonic() + self.commit_interval

    def _commit(self) -> None:
        if not self._positions:
            return
        offsets = dict(self._positions)
        op = self.history.invoke(self.name, "commit", {"member": self.name,
                                                       "offsets": offsets})
        try:
            answered = self.consumer.commit(offsets=[
                KafkaTopicPartition(self.topic, p, o) for p, o in sorted(offsets.items())],
                asynchronous=False)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            kind: OpType = "fail" if error.name() in REFUSED else "info"
            self.history.complete(op, kind, {"error": error.name()})
            return
        errors = {int(tp.partition): tp.error.name() for tp in answered or []
                  if tp.error is not None}
        self.history.complete(op, "ok", {"errors": errors})
        self.acknowledged += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.consumer.close()


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: Iterable[int],
                      timeout: float = 30.0) -> dict[int, int]:
    """partition → the group's committed offset (partitions without one are absent), through
    OffsetFetch from a consumer that does not join the group; retried until the coordinator
    answers or ``timeout`` passes."""
    return fetch_committed(_member_config(bootstrap, group, "offset-fetch"), topic, partitions,
                           timeout)


def fetch_committed(config: dict[str, Any], topic: str, partitions: Iterable[int],
                    timeout: float) -> dict[int, int]:
    """partition → the committed offset (absent: none) that a consumer of ``config`` (which
    names the group and does not join it) reads with OffsetFetch, retried every 0.5 s until
    the coordinator answers; KafkaException after ``timeout``."""
    consumer = Consumer(config)
    deadline = time.monotonic() + timeout
    wanted = list(partitions)
    try:
        while True:
            try:
                answered = consumer.committed(
                    [KafkaTopicPartition(topic, p) for p in wanted],
                    timeout=max(1.0, min(10.0, deadline - time.monotonic())))
                return {int(tp.partition): int(tp.offset) for tp in answered
                        if tp.error is None and tp.offset >= 0}
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()
