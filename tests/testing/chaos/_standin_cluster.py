"""STAND-IN for the network-partition tests only — every other chaos test runs on
``strom.testing.cluster.EmbeddedCluster``; replace this one once EmbeddedCluster can put its
brokers in network namespaces.

A ZooKeeper server and ``brokers`` :class:`EmbeddedBroker` processes on one chroot
(``zookeeper.connect`` + ``node.id``). With ``network=True`` every broker runs in a network
namespace of a :class:`NetworkFabric` (bound and advertised on the fabric's address for it,
ZooKeeper reached through the fabric's forwarder), so the nemesis can partition it. What
EmbeddedCluster needs to offer for that: a host per broker (bind + advertised address), a
hook to start the broker process inside a namespace (``preexec_fn``), ``zookeeper.connect``
pointing at the fabric's forwarder, and the fabric as ``cluster.network``.
"""
from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType

from strom.testing import EmbeddedBroker
from strom.testing.chaos.netns import NetworkFabric
from strom.testing.chaos.zkview import ZooKeeperView
from strom.testing.zookeeper import ZooKeeperServer


class StandinBroker(EmbeddedBroker):
    """An EmbeddedBroker with ``pid`` and, optionally, started inside a network namespace."""

    def __init__(self, *args: object, enter: Callable[[], None] | None = None,
                 **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._enter = enter

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def _limit_open_files(self) -> Callable[[], None] | None:
        # the parent's only hook into Popen's preexec_fn
        limit, enter = super()._limit_open_files(), self._enter
        if enter is None:
            return limit

        def preexec() -> None:
            enter()
            if limit is not None:
                limit()

        return preexec


class StandinCluster:
    def __init__(self, brokers: int = 3, *, configs: Mapping[str, object] | None = None,
                 network: bool = False, log_level: str = "WARNING") -> None:
        self.root = Path(tempfile.mkdtemp(prefix="strom-chaos-"))
        self.zookeeper = ZooKeeperServer(self.root / "zk")
        self.network = NetworkFabric() if network else None
        self.count, self.configs, self.log_level = brokers, dict(configs or {}), log_level
        self.brokers: dict[int, StandinBroker] = {}
        self.zookeeper_connect = ""
        self._view: ZooKeeperView | None = None

    def start(self, timeout: float = 60.0) -> StandinCluster:
        self.zookeeper.start()
        chroot = f"/chaos-{uuid.uuid4().hex[:8]}"
        self.zookeeper_connect = self.zookeeper.connect + chroot
        broker_zk = self.zookeeper_connect
        if self.network is not None:
            broker_zk = self.network.forward(self.zookeeper.port) + chroot
        for node in range(self.count):
            host, enter = "127.0.0.1", None
            if self.network is not None:
                host, enter = self.network.add_node(node), self.network.preexec(node)
            config = {"zookeeper.connect": broker_zk, "node.id": node,
                      "zookeeper.session.timeout.ms": 2000, **self.configs}
            broker = StandinBroker(config, data_dir=self.root / f"broker-{node}", host=host,
                                   log_level=self.log_level, enter=enter)
            self.brokers[node] = broker
            broker.start()
        self.wait_for_brokers(self.count, timeout)
        return self

    @property
    def view(self) -> ZooKeeperView:
        if self._view is None:
            self._view = ZooKeeperView(self.zookeeper_connect)
        return self._view

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def controller_id(self, timeout: float = 10.0) -> int:
        self.view.wait_for("a controller", lambda: self.view.controller() >= 0, timeout)
        return self.view.controller()

    def pause(self, node_id: int) -> None:
        os.kill(self._pid(node_id), signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        os.kill(self._pid(node_id), signal.SIGCONT)

    def _pid(self, node_id: int) -> int:
        pid = self.brokers[node_id].pid
        if pid is None:
            raise RuntimeError(f"broker {node_id} is not running")
        return pid

    def wait_for_brokers(self, count: int, timeout: float = 30.0) -> None:
        self.view.wait_for(f"{count} brokers registered",
                           lambda: len(self.view.brokers()) >= count, timeout)

    def stop(self) -> None:
        for broker in self.brokers.values():
            if broker.pid is not None:
                os.kill(broker.pid, signal.SIGCONT)
            broker.stop()

    def close(self) -> None:
        try:
            self.stop()
            if self._view is not None:
                self._view.close()
            self.zookeeper.close()
        finally:
            if self.network is not None:
                self.network.close()
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> StandinCluster:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def wait_until(check: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)
