"""Broker lifecycle: start in dependency order, serve, and shut down in reverse order.

Start: raise the open-file soft limit to the hard limit (as the JVM does for Kafka) → lock
the data directory → metadata store → load logs (crash recovery) → partitions → listener →
background tasks (retention, time-based flush, checkpoints).
Stop: stop accepting → give in-flight requests a moment → close connections → cancel background
tasks → flush and close logs, write checkpoints and the clean-shutdown marker → unlock.

A second broker on the same data directory is refused (an advisory ``flock`` on
``<data-dir>/.lock``).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import socket
from pathlib import Path
from typing import Any

from strom.broker import meta_properties
from strom.broker.dispatch import Dispatcher
from strom.broker.handlers import build_handlers
from strom.broker.network import KafkaConnection
from strom.broker.state import BrokerState
from strom.common.clock import SYSTEM_CLOCK, Clock
from strom.common.config import BrokerConfig
from strom.common.errors import StromError
from strom.common.timer import LoopScheduler
from strom.controller.producer_ids import ProducerIdManager
from strom.coordinator.group.coordinator import GroupCoordinator
from strom.coordinator.group.records import OFFSETS_TOPIC
from strom.coordinator.writer import ReplicaPartitionWriter
from strom.metadata.image import BrokerInfo
from strom.metadata.local import LocalMetadataStore
from strom.replication.replica_manager import ReplicaManager
from strom.storage.file_pool import raise_soft_limit
from strom.storage.log_manager import LogManager

log = logging.getLogger("strom.broker")

CHECKPOINT_INTERVAL_S = 60.0
SHUTDOWN_GRACE_S = 2.0


class BrokerStartupError(StromError):
    """The broker cannot start (bad listener, data directory in use, unreadable metadata)."""


def parse_listener(value: str) -> tuple[str, int]:
    """``PLAINTEXT://host:port`` or ``host:port`` → (host, port)."""
    text = value.split(",")[0].strip()
    if "://" in text:
        scheme, text = text.split("://", 1)
        if scheme.upper() != "PLAINTEXT":
            raise BrokerStartupError(f"listener security protocol {scheme} is not supported yet")
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise BrokerStartupError(f"listener {value!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


class BrokerServer:
    """One broker. Create, ``await start()``, then ``await stop()`` (or ``run()`` for both)."""

    def __init__(self, config: BrokerConfig, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.clock = clock
        self.data_dir = Path(str(config.get("log.dirs")))
        self.host = ""
        self.port = 0
        self._server: asyncio.Server | None = None
        self._connections: set[Any] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self._lock_fd: int | None = None
        self._logs: LogManager | None = None
        self.state: BrokerState | None = None
        self._stopped = asyncio.Event()

    async def start(self) -> None:
        old_limit, limit = raise_soft_limit()
        if limit != old_limit:
            log.info("raised the open-file limit from %d to %d (the hard limit)", old_limit,
                     limit)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock()
        host, port = parse_listener(str(self.config.get("listeners")))
        node_id = int(self.config.get("node.id"))
        try:
            store = LocalMetadataStore(
                self.data_dir, BrokerInfo(node_id, host or "127.0.0.1", port),
                self.config.get("cluster.id"),
            )
        except ValueError as exc:  # unreadable strom-metadata.json (JSON errors included)
            self._unlock()
            raise BrokerStartupError(
                f"cannot read the metadata in {self.data_dir}: {exc}") from None
        try:
            meta_properties.ensure(self.data_dir, store.cluster_id, node_id)
        except meta_properties.MetaPropertiesError as exc:
            self._unlock()
            raise BrokerStartupError(str(exc)) from None
        logs = LogManager(self.data_dir, self.config, self.clock)
        self._logs = logs
        state_ref: list[BrokerState] = []
        replicas = ReplicaManager(logs, lambda t: state_ref[0].topic_config(t), self.clock,
                                  node_id, LoopScheduler())
        state = BrokerState(self.config, self.data_dir, self.clock, store, replicas,
                            ProducerIdManager(store))
        state_ref.append(state)
        self.state = state
        logs.load(state.topic_config)
        if self.config.get("log.cleaner.enable"):
            io_cap = float(self.config.get("log.cleaner.io.max.bytes.per.second"))
            logs.start_cleaner(int(self.config.get("log.cleaner.backoff.ms")),
                               io_cap if io_cap < 1e300 else None)
        replicas.apply_image(store.image)
        store.subscribe(replicas.apply_image)  # every metadata change: role transitions
        coordinator = GroupCoordinator(ReplicaPartitionWriter(replicas), LoopScheduler(),
                                       self.clock, state.group_settings())
        state.group_coordinator = coordinator
        # Shards load (and unload) with the leadership of __consumer_offsets partitions.
        replicas.add_leadership_listener(OFFSETS_TOPIC, coordinator.runtime)
        dispatcher = Dispatcher(build_handlers(state))
        max_request = int(self.config.get("socket.request.max.bytes"))
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                lambda: KafkaConnection(dispatcher, max_request, self._connections),
                host or None, port, reuse_address=True, backlog=1024,
            )
        except OSError as exc:
            logs.shutdown()
            self._unlock()
            raise BrokerStartupError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
        bound = self._server.sockets[0].getsockname()
        self.host, self.port = host or bound[0], bound[1]
        adv_host, adv_port = self._advertised()
        store.register_broker(
            BrokerInfo(node_id, adv_host, adv_port, self.config.get("broker.rack")))
        self._tasks = [
            asyncio.create_task(self._every(self._retention_interval(), self._retention),
                                name="retention"),
            asyncio.create_task(self._every(1.0, self._flush_due), name="flush-scheduler"),
            asyncio.create_task(self._every(CHECKPOINT_INTERVAL_S, logs.checkpoint),
                                name="checkpoints"),
            asyncio.create_task(self._every(self._hw_checkpoint_interval(),
                                            replicas.checkpoint_high_watermarks),
                                name="high-watermark-checkpoint"),
            asyncio.create_task(self._every(self._offsets_expiry_interval(),
                                            coordinator.expire_offsets),
                                name="offsets-expiry"),
        ]
        log.info("strom broker %d listening on %s:%d, data in %s", node_id, self.host,
                 self.port, self.data_dir)

    def _advertised(self) -> tuple[str, int]:
        advertised = self.config.get("advertised.listeners")
        if advertised:
            return parse_listener(str(advertised))
        host = self.host
        if host in ("0.0.0.0", "::", ""):
            host = socket.getfqdn()
        return host, self.port

    def _retention_interval(self) -> float:
        return max(0.05, int(self.config.get("log.retention.check.interval.ms")) / 1000.0)

    def _hw_checkpoint_interval(self) -> float:
        return max(0.05, int(self.config.get("replica.high.watermark.checkpoint.interval.ms"))
                   / 1000.0)

    def _offsets_expiry_interval(self) -> float:
        return max(0.05, int(self.config.get("offsets.retention.check.interval.ms")) / 1000.0)

    def _retention(self) -> None:
        assert self._logs is not None
        self._logs.run_retention(self.clock.now_ms())

    async def _flush_due(self) -> None:
        """Time-based flushes (flush.ms) fsync in a worker thread, never on the event loop."""
        logs = self._logs
        assert logs is not None
        await asyncio.to_thread(logs.flush_due, self.clock.now_ms())

    async def _every(self, seconds: float, action: Any) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                result = action()
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                log.exception("background task %s failed", getattr(action, "__name__", action))

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            deadline = asyncio.get_running_loop().time() + SHUTDOWN_GRACE_S
            while any(c._busy for c in self._connections) and (
                asyncio.get_running_loop().time() < deadline
            ):
                await asyncio.sleep(0.01)
            for conn in list(self._connections):
                conn.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), SHUTDOWN_GRACE_S)
            self._server = None
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self.state is not None and self.state.group_coordinator is not None:
            self.state.group_coordinator.shutdown()
        if self.state is not None:
            await self.state.replicas.shutdown()
        if self._logs is not None:
            self._logs.shutdown()
            self._logs = None
        self._unlock()
        self._stopped.set()
        log.info("strom broker stopped")

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    def _lock(self) -> None:
        fd = os.open(self.data_dir / ".lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise BrokerStartupError(
                f"data directory {self.data_dir} is in use by another broker"
            ) from None
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None
