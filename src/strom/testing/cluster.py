"""An embedded cluster for tests: a real ZooKeeper server and N real broker processes.

    with EmbeddedCluster(brokers=3) as cluster:        # start(): ZooKeeper + brokers, all serve
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        cluster.brokers[cluster.controller_id()].kill()  # kill -9 the controller
        cluster.wait_for_brokers(2)

Brokers have ids 0..n-1 and are :class:`~strom.testing.broker.EmbeddedBroker` processes
(``kill()`` / ``stop()`` / ``restart()`` / ``start()``), each keeping its port and data
directory across restarts so the clients' bootstrap stays valid. Their metadata lives under
the chroot ``/strom`` of the ZooKeeper server (:mod:`strom.cli.zookeeper_server`,
``tickTime=200``), with a 2 s ZooKeeper session unless ``configs`` says otherwise, so a
killed broker's registration (and controllership) lapses in about 2 s. A broker started
while its previous session still holds ``/brokers/ids/<id>`` first waits for it to expire
(the broker would retry its registration meanwhile itself, for the session timeout and 3 s:
waiting here keeps a restart's timing out of the broker's start-up timeout). A clean stop retries an
unfinished controlled shutdown after 100 ms (``controlled.shutdown.retry.backoff.ms``, as in
Kafka's own test harness), not the default 5 s: when the whole cluster stops at once, the
last brokers' leadership has nowhere to go, and each would wait out 2 backoffs.

Brokers run through the test hook :mod:`strom.testing.stall`: :meth:`EmbeddedCluster.stall`
blocks one broker's event loop for ``stall_seconds`` (2 s by default) while its other threads
and its listening socket carry on — the "slow, not dead" broker of the fault schedules.

Config precedence per broker: the cluster's defaults (node id, ``zookeeper.connect``,
session, controlled shutdown backoff, ``broker.rack`` from ``racks``) < ``configs`` <
``broker_configs[node id]``.
Everything lives under ``data_dir`` (a temporary directory, removed by :meth:`close`, when
not given): ``zookeeper/`` and ``broker-<id>/``.

``network=True`` (root and iproute2 only, else :class:`NetworkUnavailable` with the reason)
puts each broker in a network namespace of its own, so the network can be cut
(:class:`~strom.testing.chaos.netns.NetworkFabric`, exposed as ``cluster.network``): broker
``n`` binds and advertises ``network.host(n)`` (``10.231.k.(10+n)``), is started inside its
namespace, and reaches ZooKeeper (which stays on 127.0.0.1) through the fabric's forwarder
on ``network.services_address``. The test's clients stay in the host namespace and reach
every broker, whatever is cut. The fabric lives from the constructor to :meth:`close`
(``stop`` / ``start`` keep it). The default (``network=False``) is loopback, no root.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

from strom.cli import detached
from strom.cli.cluster_probe import read_controller, wait_serving, wait_unregistered
from strom.cli.zookeeper_server import ZooKeeperServer, free_port
from strom.testing.broker import EmbeddedBroker
from strom.testing.chaos.netns import NetworkFabric, unavailable_reason

CHROOT = "/strom"
#: The ZooKeeper session of the cluster's brokers unless ``configs`` sets one.
SESSION_TIMEOUT_MS = 2000
#: The pause between controlled shutdown attempts unless ``configs`` sets one.
CONTROLLED_SHUTDOWN_BACKOFF_MS = 100
#: How long :meth:`EmbeddedCluster.stall` blocks a broker's event loop unless told.
STALL_S = 2.0


class NetworkUnavailable(RuntimeError):
    """``network=True`` where namespaces cannot be made (not root, no iproute2); the message
    says why (tests skip with it)."""


class ClusterBroker(EmbeddedBroker):
    """One broker of an :class:`EmbeddedCluster`: an :class:`EmbeddedBroker` whose
    :meth:`start` first waits for a previous registration of its id to expire."""

    def __init__(self, node_id: int, zookeeper_connect: Callable[[], str],
                 session_timeout_s: float, config: Mapping[str, object], data_dir: Path,
                 port: int, log_level: str, host: str = "127.0.0.1",
                 preexec: Callable[[], None] | None = None,
                 stall_seconds: float | None = None) -> None:
        super().__init__(config, data_dir=data_dir, port=port, host=host, log_level=log_level,
                         preexec=preexec, stall_seconds=stall_seconds)
        self.node_id = node_id
        self._zookeeper_connect = zookeeper_connect
        self._session_timeout_s = session_timeout_s

    def start(self) -> ClusterBroker:
        wait_unregistered(self._zookeeper_connect(), self.node_id,
                          self._session_timeout_s + 10.0)
        super().start()
        return self


class EmbeddedCluster:
    """ZooKeeper and ``brokers`` brokers on loopback (or each in a network namespace with
    ``network=True``); see the module doc.

    Lifecycle: :meth:`start` (returns when every broker serves), then kill / restart / pause
    brokers at will, :meth:`stop` (brokers with SIGTERM, then ZooKeeper; the data stays, so
    :meth:`start` again restarts the same cluster), :meth:`close` (stop, and remove a
    temporary directory). Not thread-safe: drive it from one test thread."""

    def __init__(self, brokers: int = 3, *, data_dir: str | Path | None = None,
                 configs: Mapping[str, object] | None = None,
                 broker_configs: Mapping[int, Mapping[str, object]] | None = None,
                 racks: Sequence[str] | None = None, log_level: str = "WARNING",
                 network: bool = False, stall_seconds: float = STALL_S) -> None:
        if brokers < 1:
            raise ValueError("an EmbeddedCluster needs at least one broker")
        if racks is not None and len(racks) != brokers:
            raise ValueError(f"racks names {len(racks)} racks for {brokers} brokers")
        if network and (reason := unavailable_reason()) is not None:
            raise NetworkUnavailable(f"EmbeddedCluster(network=True): {reason}")
        self._own_dir = data_dir is None
        self.root = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="strom-cl-"))
        self.zookeeper = ZooKeeperServer(self.root / "zookeeper")
        #: the brokers' network namespaces (None: every broker on the host's loopback).
        self.network: NetworkFabric | None = NetworkFabric() if network else None
        self.brokers: dict[int, EmbeddedBroker] = {}
        self.stall_seconds = stall_seconds
        try:
            self._add_brokers(brokers, configs, broker_configs, racks, log_level)
        except BaseException:
            self.close()
            raise

    def _add_brokers(self, brokers: int, configs: Mapping[str, object] | None,
                     broker_configs: Mapping[int, Mapping[str, object]] | None,
                     racks: Sequence[str] | None, log_level: str) -> None:
        broker_zookeeper = self.zookeeper_connect
        if self.network is not None:
            broker_zookeeper = self.network.forward(self.zookeeper.port) + CHROOT
        for node_id in range(brokers):
            host, preexec = "127.0.0.1", None
            if self.network is not None:
                host, preexec = self.network.add_node(node_id), self.network.preexec(node_id)
            config: dict[str, object] = {
                "node.id": node_id, "zookeeper.connect": broker_zookeeper,
                "zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS,
                "controlled.shutdown.retry.backoff.ms": CONTROLLED_SHUTDOWN_BACKOFF_MS}
            if racks is not None:
                config["broker.rack"] = racks[node_id]
            config.update(configs or {})
            config.update((broker_configs or {}).get(node_id, {}))
            session_s = int(str(config["zookeeper.session.timeout.ms"])) / 1000
            self.brokers[node_id] = ClusterBroker(
                node_id, lambda: self.zookeeper_connect, session_s, config=config,
                data_dir=self.root / f"broker-{node_id}", port=free_port(),
                log_level=log_level, host=host, preexec=preexec,
                stall_seconds=self.stall_seconds)

    @property
    def bootstrap(self) -> str:
        """Every broker's address, ``127.0.0.1:p1,127.0.0.1:p2,…`` (ids in order; with
        ``network``, each broker's ``network.host(id)`` instead of 127.0.0.1)."""
        return ",".join(b.bootstrap for _i, b in sorted(self.brokers.items()))

    @property
    def zookeeper_connect(self) -> str:
        """``127.0.0.1:<port>/strom``: ZooKeeper as the test (host namespace) reaches it;
        with ``network`` the brokers' own ``zookeeper.connect`` is the fabric's forwarder."""
        return self.zookeeper.connect + CHROOT

    def start(self, timeout: float = 60.0) -> EmbeddedCluster:
        """Start ZooKeeper (if not running) and every stopped broker, in parallel; return
        once every broker's Metadata lists them all."""
        if self.zookeeper.pid is None:
            self.zookeeper.start(timeout)
        stopped = [b for b in self.brokers.values() if b.process is None]
        _in_parallel([b.start for b in stopped])
        self.wait_for_brokers(len(self.brokers), timeout)
        return self

    def wait_for_brokers(self, count: int, timeout: float = 30.0) -> None:
        """Wait until ``count`` brokers are registered and every running, unpaused broker
        serves Metadata listing exactly them (TimeoutError otherwise)."""
        wait_serving(lambda: [b.bootstrap for b in self._running()], count, timeout)

    def controller_id(self, timeout: float = 10.0) -> int:
        """The controller's node id, from ``/controller`` in ZooKeeper (waits for one to be
        elected; TimeoutError after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            controller = read_controller(self.zookeeper_connect, timeout=max(1.0, timeout))
            if controller is not None:
                return controller
            if time.monotonic() > deadline:
                raise TimeoutError(f"no controller elected in {timeout:g}s")
            time.sleep(0.1)

    def pause(self, node_id: int) -> None:
        """SIGSTOP broker ``node_id`` (a zombie: its sockets and session stay open, silent)."""
        self._signal(node_id, signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        """SIGCONT broker ``node_id``."""
        self._signal(node_id, signal.SIGCONT)

    def stall(self, node_id: int) -> None:
        """Block broker ``node_id``'s event loop for ``stall_seconds`` (returns at once)."""
        self.brokers[node_id].stall()

    def _signal(self, node_id: int, sig: signal.Signals) -> None:
        pid = self.brokers[node_id].pid
        if pid is None:
            raise RuntimeError(f"broker {node_id} is not running")
        os.kill(pid, sig)

    def _running(self) -> list[EmbeddedBroker]:
        """Brokers whose process runs and is not stopped by SIGSTOP."""
        return [b for _i, b in sorted(self.brokers.items()) if b.pid is not None
                and b.process is not None and b.process.poll() is None
                and detached.state(b.pid) != "T"]

    def stop(self) -> None:
        """Stop every broker (SIGCONT + SIGTERM, in parallel), then ZooKeeper."""
        _in_parallel([b.stop for b in self.brokers.values()])
        self.zookeeper.stop()

    def close(self) -> None:
        """Stop, delete the network namespaces (``network``), remove a temporary directory."""
        try:
            self.stop()
        finally:
            if self.network is not None:
                self.network.close()
            if self._own_dir:
                shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> EmbeddedCluster:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _in_parallel(calls: Sequence[Callable[[], object]]) -> None:
    """Run ``calls`` in threads and wait for all; re-raise the first failure."""
    errors: list[BaseException] = []

    def run(call: Callable[[], object]) -> None:
        try:
            call()
        except BaseException as exc:  # handed to the caller below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(call,), daemon=True) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
