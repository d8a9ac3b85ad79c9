"""The consume-transform-produce workload's parts on the test's side:

- :func:`fill_inputs`: unique input values ``in-<n>`` written to partition ``n % partitions``
  of the input topic by an idempotent ``acks=all`` producer (the final read of the input
  topic, not this call, is the checker's list of inputs);
- :class:`LoopSupervisor`: runs the application (:mod:`~strom.testing.chaos.eos_loop`) as
  a subprocess, one *incarnation* at a time (``L0``, ``L1``, …, all with the same
  transactional id and group), relays each incarnation's history lines into the
  :class:`~strom.testing.chaos.history.History` under its name, and kills it (kill -9: the
  next incarnation's ``init_transactions`` fences it) or stops it (SIGTERM: it finishes the
  transaction in hand and leaves);
- :func:`input_ends`, :func:`wait_drained`: the input partitions' high watermarks, and the
  wait until the group's committed offsets reach them (restarting an incarnation that died
  on its own, as a process supervisor would).

Each incarnation's stderr goes to ``<log_dir>/<name>.log`` for post-mortems. Threads: one
relay thread per incarnation; the supervisor is driven by one thread (the schedule runner).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

import strom
from strom.testing.chaos.group_workload import fetch_committed
from strom.testing.chaos.history import History, Op
from strom.testing.chaos.workload import FAST_RECONNECT

LOOP_MODULE = "strom.testing.chaos.eos_loop"


def fill_inputs(bootstrap: str, topic: str, partitions: int, count: int, start: int = 0,
                timeout: float = 60.0) -> int:
    """Write inputs ``in-<start>`` … ``in-<start + count - 1>``; returns how many were
    acknowledged (RuntimeError if any delivery failed)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5, **FAST_RECONNECT})
    failed: list[str] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err.name())

    for n in range(start, start + count):
        while True:
            try:
                producer.produce(topic, value=f"in-{n}".encode(), partition=n % partitions,
                                 on_delivery=report)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    left = producer.flush(timeout)
    if left or failed:
        raise RuntimeError(f"filling {topic}: {left} undelivered, failures {failed[:5]}")
    return count


@dataclass(frozen=True)
class LoopSettings:
    """What every incarnation of the application is started with (see
    :mod:`~strom.testing.chaos.eos_loop`)."""

    bootstrap: str
    input: str
    output: str
    group: str
    transactional_id: str
    output_partitions: int
    batch: int = 20
    abort_ratio: float = 0.1
    seed: int = 0
    #: the static member id (``group.instance.id``) of the incarnations; "" for dynamic
    instance_id: str = "eos-loop"
    #: the consumer's ``group.protocol``: ``classic`` or ``consumer`` (KIP-848)
    group_protocol: str = "classic"

    def argv(self, name: str) -> list[str]:
        return [sys.executable, "-m", LOOP_MODULE, self.bootstrap, self.input, self.output,
                self.group, self.transactional_id, name, "--instance-id", self.instance_id,
                "--batch", str(self.batch), "--abort-ratio", str(self.abort_ratio),
                "--seed", str(self.seed), "--partitions", str(self.output_partitions),
                "--group-protocol", self.group_protocol]


class LoopProcess:
    """One incarnation: the subprocess and the thread relaying its history lines."""

    def __init__(self, name: str, settings: LoopSettings, history: History,
                 log_path: Path) -> None:
        self.name, self.history = name, history
        source = str(Path(strom.__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (source, os.environ.get("PYTHONPATH", "")) if p)}
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(settings.argv(name), stdout=subprocess.PIPE,
                                        stderr=self._log, env=env)
        self._ops: dict[int, Op] = {}
        self._relay = threading.Thread(target=self._run, name=f"eos-relay-{name}",
                                       daemon=True)
        self._relay.start()
        history.nemesis("loop-start", {"name": name, "pid": self.process.pid,
                                       "instance_id": settings.instance_id})

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def _run(self) -> None:
        stdout: IO[bytes] | None = self.process.stdout
        assert stdout is not None
        for raw in stdout:
            try:
                line = json.loads(raw)
            except ValueError:
                continue  # not a history line
            self._apply(line)

    def _apply(self, line: Mapping[str, Any]) -> None:
        kind, value = line.get("op"), dict(line.get("value") or {})
        if kind == "invoke":
            self._ops[int(line["id"])] = self.history.invoke(self.name, str(line["f"]), value)
        elif kind == "complete":
            op = self._ops.pop(int(line["id"]), None)
            if op is not None:
                self.history.complete(op, line["type"], value)
        elif kind == "event":
            self.history.event(self.name, line["type"], str(line["f"]), value)

    def kill(self) -> None:
        """kill -9; returns once the relay read what the process wrote before it died."""
        self.process.kill()
        self._finish()

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (the loop ends after the transaction in hand); kill -9 after
        ``timeout`` (after a stack dump into its log). Returns the exit code."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.history.nemesis("loop-stuck", {"name": self.name})
                self.process.send_signal(signal.SIGUSR1)  # its stacks, into its log
                time.sleep(1.0)
                self.process.kill()
        self._finish()
        return int(self.process.returncode)

    def _finish(self) -> None:
        self.process.wait()
        self._relay.join(30)
        self._log.close()


class LoopSupervisor:
    """Starts, kills and replaces the incarnations of the application (module docstring)."""

    def __init__(self, settings: LoopSettings, history: History, log_dir: Path) -> None:
        self.settings, self.history, self.log_dir = settings, history, log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        self.current: LoopProcess | None = None
        self.started = 0

    def start(self, *, instance_id: str | None = None) -> LoopProcess:
        """A new incarnation (the previous one must be gone), with another static member id
        if ``instance_id`` is given ("" for a dynamic member)."""
        if self.current is not None and self.current.alive():
            raise RuntimeError(f"{self.current.name} is still running")
        if instance_id is not None:
            self.settings = replace(self.settings, instance_id=instance_id)
        name = f"L{self.started}"
        self.started += 1
        self.current = LoopProcess(name, self.settings, self.history,
                                   self.log_dir / f"{name}.log")
        return self.current

    def kill(self) -> str:
        """kill -9 the running incarnation; its name."""
        current = self.current
        if current is None:
            raise RuntimeError("no incarnation to kill")
        self.history.nemesis("kill-loop", {"name": current.name, "pid": current.pid})
        current.kill()
        self.history.nemesis("killed-loop", {"name": current.name})
        return current.name

    def ensure_running(self) -> None:
        """Start the next incarnation if the current one is gone (killed, or exited on its
        own: that exit is recorded as a ``loop-exited`` event)."""
        current = self.current
        if current is not None and current.alive():
            return
        if current is not None and current.process.returncode is not None \
                and current.process.returncode != -signal.SIGKILL:
            current.stop()
            self.history.nemesis("loop-exited", {"name": current.name,
                                                 "code": current.process.returncode})
        self.start()

    def stop(self) -> None:
        if self.current is not None:
            code = self.current.stop()
            self.history.nemesis("loop-stopped", {"name": self.current.name, "code": code})


def input_ends(bootstrap: str, topic: str, partitions: Iterable[int],
               timeout: float = 30.0) -> dict[int, int]:
    """partition → high watermark of the input topic (retried while brokers move)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-ends",
                         **FAST_RECONNECT})
    deadline = time.monotonic() + timeout
    try:
        ends = {}
        for p in partitions:
            while True:
                try:
                    ends[p] = int(consumer.get_watermark_offsets(
                        KafkaTopicPartition(topic, p), timeout=5)[1])
                    break
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        return ends
    finally:
        consumer.close()


def group_offsets(bootstrap: str, group: str, topic: str, partitions: Iterable[int],
                  timeout: float = 30.0) -> dict[int, int]:
    """partition → the group's committed offset (absent: none), read as the application's
    read_committed consumer reads it: OffsetFetch with ``require_stable``, so an offset still
    pending in an open transaction is waited for (UNSTABLE_OFFSET_COMMIT, retried). From a
    consumer that does not join the group; KafkaException after ``timeout``."""
    return fetch_committed({"bootstrap.servers": bootstrap, "group.id": group,
                            "enable.auto.commit": False, "isolation.level": "read_committed",
                            "client.id": "eos-offsets", **FAST_RECONNECT},
                           topic, partitions, timeout)


def wait_drained(supervisor: LoopSupervisor, ends: Mapping[int, int],
                 timeout: float) -> dict[int, int]:
    """Wait until the group's committed offsets reach ``ends`` (every input processed),
    keeping an incarnation running; returns the last committed offsets seen (short of
    ``ends`` if ``timeout`` passed first)."""
    settings = supervisor.settings
    deadline = time.monotonic() + timeout
    offsets: dict[int, int] = {}
    while True:
        supervisor.ensure_running()
        try:
            offsets = group_offsets(settings.bootstrap, settings.group, settings.input, ends,
                                    timeout=10)
        except KafkaException:
            offsets = {}
        if all(offsets.get(p, 0) >= end for p, end in ends.items()):
            return offsets
        if time.monotonic() > deadline:
            return offsets
        time.sleep(1.0)
