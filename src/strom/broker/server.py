"""Broker lifecycle: start in dependency order, serve, and shut down in reverse order.

Start: raise the open-file soft limit to the hard limit (as the JVM does for Kafka) → lock
the data directory → metadata store (and the dynamic broker configs stored in it) → find the
logs (without opening them) → partitions → listener → background tasks (retention,
time-based flush, checkpoints). The replica manager opens the logs (crash recovery included)
a slice at a time after the listener is up, internal topics first, and any log a request
needs at once, so a broker with many partitions answers from the start.
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
import shutil
import socket
from pathlib import Path
from typing import Any

from strom.broker import meta_properties, zookeeper_metadata
from strom.broker.acceptor import Acceptor, bind
from strom.broker.access import Access
from strom.broker.connection_limits import ConnectionLimits
from strom.broker.connection_rates import ConnectionRates
from strom.broker.dispatch import Dispatcher
from strom.broker.dynamic_config import DynamicConfigApplier, effective_config, warn_ignored
from strom.broker.failure_detector import FailureDetector
from strom.broker.handlers import build_handlers
from strom.broker.metadata_recovery import keep_topics_on_disk
from strom.broker.network import Connections, KafkaConnection
from strom.broker.quotas.manager import ClientQuotas
from strom.broker.replica_fetch import Replication
from strom.broker.request_memory import RequestMemoryPool
from strom.broker.security.authorizer import AclMap, Authorizer
from strom.broker.security.inter_broker import broker_principal, inter_broker_security
from strom.broker.security.listeners import ListenerSet, parse_listeners
from strom.broker.security.runtime import ListenerRuntime, build_runtimes
from strom.broker.state import BrokerState
from strom.client.security import ClientSecurity
from strom.common.clock import SYSTEM_CLOCK, Clock
from strom.common.config import BrokerConfig
from strom.common.errors import StromError
from strom.common.timer import LoopScheduler
from strom.common.types import TopicPartition
from strom.controller.election import ControllerElection
from strom.controller.producer_ids import ProducerIdManager
from strom.coordinator.group.coordinator import GroupCoordinator
from strom.coordinator.group.records import OFFSETS_TOPIC
from strom.coordinator.txn.coordinator import TXN_TOPIC, TxnCoordinator
from strom.coordinator.txn.markers import NetworkMarkerSender
from strom.coordinator.txn.peers import Leader
from strom.coordinator.txn.verifier import RemoteTxnVerifier
from strom.coordinator.writer import ReplicaPartitionWriter
from strom.metadata.image import BrokerInfo, Endpoint, ScramCredential
from strom.metadata.local import LocalMetadataStore
from strom.metadata.zk_session import ZooKeeperUnavailableError
from strom.metadata.zookeeper import BrokerIdAlreadyRegisteredError, ZooKeeperMetadataStore
from strom.replication.replica_manager import ReplicaManager
from strom.storage.file_pool import raise_soft_limit
from strom.storage.health import LogDirHealth
from strom.storage.log_manager import LogManager, cleaner_settings

log = logging.getLogger("strom.broker")

CHECKPOINT_INTERVAL_S = 60.0
#: Worker threads that open and create partition logs (file-system calls stay off the loop).
#: Their work is mostly fsync, which releases the GIL and which ext4 commits together when
#: several wait at once: 8 rather than 2 (docs/benchmarks.md, topic creation: 451 / 252
#: against 286 / 216 partitions/s, alternated runs on a loaded machine, so an indication).
LOG_THREADS = 8
#: Registration refused because the id is still registered: retried this often, until the
#: ZooKeeper session timeout and this slack have passed.
REGISTRATION_RETRY_S = 0.25
REGISTRATION_RETRY_SLACK_S = 3.0
SHUTDOWN_GRACE_S = 2.0
TLS_HANDSHAKE_TIMEOUT_S = 10.0
LISTEN_BACKLOG = 1024
LOCK_FILE = ".lock"
IDLE_CHECK_INTERVAL_S = 1.0


class BrokerStartupError(StromError):
    """The broker cannot start (bad listener, data directory in use, unreadable metadata)."""


def _public_host(host: str) -> str:
    """The host to advertise for a bound address (a wildcard bind: this machine's name)."""
    return socket.getfqdn() if host in ("0.0.0.0", "::", "") else host


class BrokerServer:
    """One broker. Create, ``await start()``, then ``await stop()`` (or ``run()`` for both)."""

    def __init__(self, config: BrokerConfig, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.clock = clock
        self.data_dir = Path(str(config.get("log.dirs")))
        self.host = ""
        self.port = 0
        self._servers: list[Acceptor] = []
        #: listener name → bound (host, port), once started.
        self.bound: dict[str, tuple[str, int]] = {}
        queued_max = int(config.get("queued.max.request.bytes"))
        idle_ms = int(config.get("connections.max.idle.ms"))
        self._connections = Connections(
            RequestMemoryPool(None if queued_max == -1 else queued_max,
                              clock=lambda: asyncio.get_running_loop().time(),
                              call_later=lambda s, f: asyncio.get_running_loop().call_later(
                                  s, f)),
            None if idle_ms == -1 else idle_ms / 1000.0,
            ConnectionLimits(lambda: self.state.config if self.state is not None else config))
        self._rates = ConnectionRates(
            lambda: self.state.config if self.state is not None else config,
            samples=int(config.get("quota.window.num")),
            window_s=float(config.get("quota.window.size.seconds")))
        self._tasks: list[asyncio.Task[None]] = []
        self._lock_fd: int | None = None
        self._logs: LogManager | None = None
        self.state: BrokerState | None = None
        self._markers: NetworkMarkerSender | None = None
        self.health = LogDirHealth(self.data_dir)
        self._stopped = asyncio.Event()
        self._authorizer: Authorizer | None = None
        self._zk_store: ZooKeeperMetadataStore | None = None
        self._inter_security: ClientSecurity | None = None
        self._replication: Replication | None = None
        self._failure_detector: FailureDetector | None = None
        self._election: ControllerElection | None = None

    async def start(self) -> None:
        """Start, or raise :class:`BrokerStartupError` (or ``OSError``) having released what
        this attempt took: the listener, the logs, the lock — and the data directory when it
        was created (or found empty) by this attempt, so a failed first start leaves no
        half-initialised directory behind."""
        old_limit, limit = raise_soft_limit()
        if limit != old_limit:
            log.info("raised the open-file limit from %d to %d (the hard limit)", old_limit,
                     limit)
        try:  # before any disk work
            listeners = parse_listeners(self.config)
            runtimes = build_runtimes(self.config, listeners, self._scram_credential)
            inter_security = self._inter_security = inter_broker_security(self.config,
                                                                          listeners)
            self._authorizer = Authorizer.from_config(self.config, self._acls)
            if self._authorizer is not None:
                self._authorizer.warn_about_broker_principal(broker_principal(inter_security))
        except StromError as exc:
            raise BrokerStartupError(str(exc)) from None
        created = self._make_data_dir()
        self._lock()
        fresh = self._holds_only_the_lock()
        try:
            await self._start(listeners, runtimes, self._authorizer, inter_security)
        except BaseException:
            await self._abandon_start(created if fresh else [], fresh)
            raise

    def _scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """A user's stored SCRAM credential (SASL listeners look them up per login)."""
        state = self.state
        if state is None:
            return None
        return state.store.image.scram_credentials.get(user, {}).get(mechanism)

    def _acls(self) -> AclMap:
        """The current ACLs (the authorizer reads them per decision)."""
        state = self.state
        return state.store.image.acls if state is not None else {}

    async def _start(self, listeners: ListenerSet, runtimes: list[ListenerRuntime],
                     authorizer: Authorizer | None,
                     inter_security: ClientSecurity | None) -> None:
        node_id = int(self.config.get("node.id"))
        inter = listeners.named(listeners.inter_broker)
        if self._connections.limits is not None and len(runtimes) > 1:
            # Kafka lets the inter-broker listener past max.connections; strom only when it
            # is a listener of its own (with one listener, the limit would never apply).
            self._connections.limits.inter_broker = listeners.inter_broker
        if len(runtimes) > 1:
            self._rates.protected = listeners.inter_broker
        connect = zookeeper_metadata.zookeeper_connect(self.config)
        store: LocalMetadataStore | ZooKeeperMetadataStore
        try:
            recorded_cluster = meta_properties.check(self.data_dir, node_id)
            if connect is None:
                store = LocalMetadataStore(
                    self.data_dir, BrokerInfo(node_id, inter.host or "127.0.0.1", inter.port),
                    self.config.get("cluster.id") or recorded_cluster, health=self.health,
                )
            else:
                store = self._zk_store = zookeeper_metadata.open_store(self.config, connect)
                if recorded_cluster not in (None, store.cluster_id):
                    raise BrokerStartupError(
                        f"{self.data_dir} belongs to cluster {recorded_cluster}, but the "
                        f"ZooKeeper at {connect} holds cluster {store.cluster_id}")
            meta_properties.ensure(self.data_dir, store.cluster_id, node_id)
        except (meta_properties.MetaPropertiesError, ZooKeeperUnavailableError) as exc:
            raise BrokerStartupError(str(exc)) from None
        except ValueError as exc:  # unreadable strom-metadata.json (and its previous copy)
            raise BrokerStartupError(
                f"cannot read the metadata in {self.data_dir}: {exc}") from None
        config = effective_config(self.config, store.image, node_id)
        warn_ignored(config)
        logs = LogManager(self.data_dir, config, self.clock)
        self._logs = logs
        state_ref: list[BrokerState] = []
        replicas = ReplicaManager(logs, lambda t: state_ref[0].topic_config(t), self.clock,
                                  node_id, LoopScheduler(), health=self.health,
                                  log_threads=LOG_THREADS)
        state = BrokerState(config, self.data_dir, self.clock, store, replicas,
                            ProducerIdManager(store), quotas=ClientQuotas(
                                self.clock.monotonic, samples=int(config.get("quota.window.num")),
                                window_s=float(config.get("quota.window.size.seconds"))))
        state_ref.append(state)
        self.state = state
        state.access = Access(authorizer)
        if authorizer is None and store.image.acls:
            log.warning("ACLs on %d resource patterns are stored but authorizer.class.name is "
                        "empty: they are not enforced (set authorizer.class.name=acls to "
                        "enforce them)", len(store.image.acls))
        logs.scan()  # the replica manager opens each log when its partition needs it
        if store.recovered_from_previous:
            keep_topics_on_disk(state, logs)
        if config.get("log.cleaner.enable"):
            logs.start_cleaner(*cleaner_settings(config))
        throttles = state.replication_quotas
        self._replication = replication = Replication(
            config, node_id, replicas, store, self._address_of, self.clock, inter_security,
            quota=throttles.follower)
        replicas.apply_image(store.image)
        store.subscribe(replicas.apply_image)  # every metadata change: role transitions
        store.subscribe(DynamicConfigApplier(self.config, state))  # dynamic broker configs
        throttles.configure(store.image, state.config)  # after the applier: its config
        store.subscribe(lambda image: throttles.configure(image, state.config))
        state.quotas.configure(store.image)
        store.subscribe(state.quotas.configure)  # client quotas
        self._rates.configure(store.image)
        store.subscribe(self._rates.configure)  # connection creation rates per IP
        coordinator = GroupCoordinator(ReplicaPartitionWriter(replicas), LoopScheduler(),
                                       self.clock, state.group_settings(),
                                       topics=lambda: store.image.topics)
        state.group_coordinator = coordinator
        # Shards load (and unload) with the leadership of __consumer_offsets partitions.
        replicas.add_leadership_listener(OFFSETS_TOPIC, coordinator.runtime)
        self._markers = NetworkMarkerSender(self._leader_of, self._partition_exists,
                                           security=inter_security)
        state.txn_coordinator = TxnCoordinator(
            ReplicaPartitionWriter(replicas), LoopScheduler(), self.clock, state.txn_settings(),
            state.producer_ids.next_id, self._markers)
        replicas.add_leadership_listener(TXN_TOPIC, state.txn_coordinator.runtime)
        state.txn_verifier = RemoteTxnVerifier(self._txn_coordinator_of,
                                               security=inter_security)
        dispatcher = Dispatcher(build_handlers(state), self.health.failure, state.quotas)
        max_request = int(self.config.get("socket.request.max.bytes"))
        self.bound = {}
        for runtime in runtimes:
            self.bound[runtime.name] = await self._listen(dispatcher, max_request, runtime)
        self.host, self.port = self.bound[listeners.inter_broker]
        try:
            await self._register(store, self._broker_info(node_id, listeners))
            if isinstance(store, ZooKeeperMetadataStore):
                election, state.controller = zookeeper_metadata.stand_for_controller(
                    store, node_id, lambda: state.config, state.topic_config)
                self._election = election
                self._failure_detector = FailureDetector(store, node_id, election,
                                                         state.controller, config,
                                                         inter_security)
        except (BrokerIdAlreadyRegisteredError, ZooKeeperUnavailableError) as exc:
            raise BrokerStartupError(str(exc)) from None
        loop = asyncio.get_running_loop()
        connections = self._connections
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
            asyncio.create_task(self._every(replication.shrink_interval_s,
                                            replication.shrink_isrs), name="isr-shrink"),
        ]
        if connections.idle_timeout_s is not None:
            self._tasks.append(asyncio.create_task(
                self._every(min(connections.idle_timeout_s / 4, IDLE_CHECK_INTERVAL_S),
                            lambda: connections.close_idle(loop.time())),
                name="idle-connections"))
        for runtime in runtimes:
            host, port = self.bound[runtime.name]
            log.info("strom broker %d: listener %s (%s) on %s:%d", node_id, runtime.name,
                     runtime.protocol.value, host, port)
        log.info("strom broker %d listening on %s:%d, data in %s", node_id, self.host,
                 self.port, self.data_dir)

    async def _listen(self, dispatcher: Dispatcher, max_request: int,
                      runtime: ListenerRuntime) -> tuple[str, int]:
        """Bind one listener and start accepting on it; its bound (host, port)."""
        connections = self._connections
        host, port = runtime.listener.host, runtime.listener.port
        try:
            sockets = await bind(host, port, LISTEN_BACKLOG)
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            which = f" (listener {runtime.name})" if len(self.bound) or self._servers \
                or runtime.name != "PLAINTEXT" else ""
            raise BrokerStartupError(f"cannot listen on {host}:{port}{which}: {reason}") from None
        acceptor = Acceptor(
            sockets, runtime.name,
            lambda: KafkaConnection(dispatcher, max_request, connections, runtime),
            self._rates, runtime.ssl_context, TLS_HANDSHAKE_TIMEOUT_S)
        self._servers.append(acceptor)
        acceptor.start()
        bound = sockets[0].getsockname()
        return host or bound[0], bound[1]

    async def _register(self, store: LocalMetadataStore | ZooKeeperMetadataStore,
                        broker: BrokerInfo) -> None:
        """Register this broker; on ZooKeeper, while its id is still registered by another
        session, retry until that session would have expired (``zookeeper.session.timeout.ms``
        and :data:`REGISTRATION_RETRY_SLACK_S`), then fail. A broker killed and restarted at
        once finds its own last registration there until ZooKeeper expires that session, or
        the controller removes it (two seconds after finding the old process dead — unless
        the new one is listening on the port by then): Kafka 4's brokers retry a registration
        refused as a duplicate (DUPLICATE_BROKER_REGISTRATION) the same way, where strom
        exited at once."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (int(self.config.get("zookeeper.session.timeout.ms")) / 1000
                                  + REGISTRATION_RETRY_SLACK_S)
        waited = False
        while True:
            try:
                store.register_broker(broker)
            except BrokerIdAlreadyRegisteredError as exc:
                if not isinstance(store, ZooKeeperMetadataStore) or loop.time() >= deadline:
                    raise
                if not waited:
                    log.warning("%s; retrying until that session has expired (a restart "
                                "right after this broker stopped?)", exc)
                    waited = True
                await asyncio.sleep(REGISTRATION_RETRY_S)
                continue
            if waited:
                log.info("broker %d registered", broker.node_id)
            return

    def _broker_info(self, node_id: int, listeners: ListenerSet) -> BrokerInfo:
        """This broker as clients see it: every listener's advertised address."""
        endpoints = []
        for listener in listeners.listeners:
            host, port = self.bound[listener.name]
            if listener.advertised_host is not None:
                host = listener.advertised_host or _public_host(host)
                port = listener.advertised_port or port
            else:
                host = _public_host(host)
            endpoints.append(Endpoint(listener.name, host, port, listener.protocol.value))
        inter = next(e for e in endpoints if e.listener == listeners.inter_broker)
        return BrokerInfo(node_id, inter.host, inter.port, self.config.get("broker.rack"),
                          tuple(endpoints))

    def _leader_of(self, tp: TopicPartition) -> Leader | None:
        """Where a partition's leader listens (transaction markers go there)."""
        assert self.state is not None
        image = self.state.store.image
        topic = image.topics.get(tp.topic)
        if topic is None or not 0 <= tp.partition < len(topic.partitions):
            return None
        broker = image.brokers.get(topic.partitions[tp.partition].leader)
        return None if broker is None else Leader(broker.node_id, broker.host, broker.port)

    def _txn_coordinator_of(self, transactional_id: str) -> Leader | None:
        """The broker leading the transactional id's ``__transaction_state`` partition."""
        assert self.state is not None
        txns = self.state.txns
        return self._leader_of(TopicPartition(TXN_TOPIC,
                                              txns.partition_for(transactional_id)))

    def _address_of(self, node_id: int) -> tuple[str, int] | None:
        """Where a broker's inter-broker listener is (followers fetch from there)."""
        assert self.state is not None
        broker = self.state.store.image.brokers.get(node_id)
        return None if broker is None else (broker.host, broker.port)

    def _partition_exists(self, tp: TopicPartition) -> bool:
        assert self.state is not None
        topic = self.state.store.image.topics.get(tp.topic)
        return topic is not None and 0 <= tp.partition < len(topic.partitions)

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
        name = getattr(action, "__name__", action)
        while True:
            await asyncio.sleep(seconds)
            try:
                result = action()
                if asyncio.iscoroutine(result):
                    await result
            except OSError as exc:  # a failing data directory: reported once, not every round
                self.health.failure(exc, f"running {name}")
            except Exception:
                log.exception("background task %s failed", name)

    async def stop(self) -> None:
        if self._failure_detector is not None:  # a stopping broker judges no one
            await self._failure_detector.close()
            self._failure_detector = None
        if self._zk_store is not None:  # its listeners close before its session ends
            self._zk_store.retire()
        if self._election is not None:  # deposed meanwhile, it takes nothing back
            self._election.withdraw()
        await self._controlled_shutdown()
        if self._replication is not None:
            # As Kafka's StopReplica after a controlled shutdown: a broker on its way out
            # fetches no more (the leaders would take it back into their ISR meanwhile).
            await self._replication.fetchers.close()
        if self._servers:
            for server in self._servers:
                server.close()
            deadline = asyncio.get_running_loop().time() + SHUTDOWN_GRACE_S
            while any(c.busy for c in self._connections) and (
                asyncio.get_running_loop().time() < deadline
            ):
                await asyncio.sleep(0.01)
            for conn in list(self._connections):
                conn.close()
            for server in self._servers:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(SHUTDOWN_GRACE_S):
                        await server.wait_closed()
            self._servers = []
        if self.state is not None:
            await self.state.topic_writes.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._replication is not None:
            await self._replication.close()
        if self.state is not None and self.state.group_coordinator is not None:
            self.state.group_coordinator.shutdown()
        if self.state is not None and self.state.txn_coordinator is not None:
            self.state.txn_coordinator.shutdown()
        if self._markers is not None:
            await self._markers.close()
        if self.state is not None and self.state.txn_verifier is not None:
            await self.state.txn_verifier.close()
        if self.state is not None:
            await self.state.replicas.shutdown()
        if self._logs is not None:
            try:
                self._logs.shutdown()
            except OSError as exc:  # no clean-shutdown marker: the next start recovers
                self.health.failure(exc, "shutting down the logs")
            self._logs = None
        if self.state is not None and self.state.controller is not None:
            self.state.controller.close()
        if self._zk_store is not None:  # ends the session: registration and controllership
            self._zk_store.close()
            self._zk_store = None
        self._unlock()
        self._stopped.set()
        log.info("strom broker stopped")

    async def _controlled_shutdown(self) -> None:
        """On ZooKeeper metadata, while still serving: have the controller move this
        broker's leadership elsewhere first (``controlled.shutdown.enable``)."""
        store, state = self._zk_store, self.state
        if store is None or state is None or not self._servers or not self.config.get(
                "controlled.shutdown.enable"):
            return
        await zookeeper_metadata.controlled_shutdown(self.config, store, state.node_id,
                                                     self._inter_security)

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    def _make_data_dir(self) -> list[Path]:
        """Create the data directory (and missing parents); return those created, deepest
        first. A path that exists but is not a directory is a clear error."""
        if self.data_dir.exists() and not self.data_dir.is_dir():
            raise BrokerStartupError(
                f"the data directory {self.data_dir} (log.dirs / --data-dir) is a file, not a "
                "directory")
        missing = [p for p in (self.data_dir, *self.data_dir.parents) if not p.exists()]
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BrokerStartupError(
                f"cannot create the data directory {self.data_dir}: "
                f"{exc.strerror or exc}") from None
        return [p for p in missing if p.is_dir()]

    def _holds_only_the_lock(self) -> bool:
        """Whether the (locked) data directory holds nothing but the lock file: nothing in
        it predates this start."""
        return all(entry.name == LOCK_FILE for entry in os.scandir(self.data_dir))

    async def _abandon_start(self, created: list[Path], fresh: bool) -> None:
        """Undo a failed :meth:`start`: stop what it started (as :meth:`stop` does), and
        remove what it wrote into a data directory that held nothing before (``fresh``),
        then the directories it created. Never raises (the start's error is the one to
        report)."""
        with contextlib.suppress(Exception):
            await self.stop()
        self._unlock()
        self.state = None
        if not fresh:
            return
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.data_dir):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
        for directory in created:
            with contextlib.suppress(OSError):
                directory.rmdir()
        log.info("removed what the failed start wrote to %s", self.data_dir)

    def _lock(self) -> None:
        fd = os.open(self.data_dir / LOCK_FILE, os.O_CREAT | os.O_RDWR, 0o644)
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
