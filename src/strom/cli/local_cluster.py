"""A development cluster on this machine: one ZooKeeper server and N brokers on loopback, as
detached processes under one directory (``strom cluster up|down|status --data-dir DIR``).

Layout of DIR::

    cluster.json            {"version": 1, "chroot": "/strom", "zookeeper": {"port": P},
                             "brokers": {"0": {"port": P0}, …}, "settings": {"k": "v"},
                             "broker_log_level": "INFO"}
    zookeeper/              zoo.cfg, data/, zookeeper.log, zookeeper.pid
    broker-<id>/            data/ (the broker's log.dirs), broker.log, broker.pid

``cluster.json`` is written by ``up`` and read by every command; running ``up`` again on the
same DIR restarts the processes that are not alive with the same ids and ports (a new port
only where the old one is taken; the file is updated), and may add brokers, never remove
them. The brokers register under the chroot of ``zookeeper.connect``, which is what makes
them one cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from strom.cli import detached
from strom.cli.cluster_probe import read_controller, wait_serving, wait_unregistered
from strom.cli.zookeeper_server import ZooKeeperServer, free_port, port_is_free
from strom.common.errors import StromError

STATE_FILE = "cluster.json"
CHROOT = "/strom"
ZOOKEEPER_MARKER = "org.apache.zookeeper"
BROKER_MARKER = "strom"


class ClusterStateError(StromError):
    """DIR holds no cluster, or one that cannot be started as asked."""


@dataclass
class LocalCluster:
    """The state of one development cluster (``cluster.json`` in ``root``)."""

    root: Path
    zookeeper_port: int = 0
    broker_ports: dict[int, int] = field(default_factory=dict)
    settings: dict[str, str] = field(default_factory=dict)
    broker_log_level: str = "INFO"
    chroot: str = CHROOT
    #: The broker processes this object started (node id → process), asked before /proc.
    _started: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)

    # -- state -------------------------------------------------------------------------------
    @classmethod
    def load(cls, root: Path) -> LocalCluster:
        """The cluster in ``root``; ClusterStateError when there is none."""
        path = root / STATE_FILE
        try:
            state = json.loads(path.read_text())
            return cls(root, int(state["zookeeper"]["port"]),
                       {int(i): int(b["port"]) for i, b in state["brokers"].items()},
                       {str(k): str(v) for k, v in state.get("settings", {}).items()},
                       str(state.get("broker_log_level", "INFO")),
                       str(state.get("chroot", CHROOT)))
        except FileNotFoundError:
            raise ClusterStateError(f"no cluster in {root} (no {STATE_FILE}); start one with "
                                    f"strom cluster up --data-dir {root}") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ClusterStateError(f"{path} is not a strom cluster state file: {exc}") from None

    def save(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        state = {"version": 1, "chroot": self.chroot,
                 "zookeeper": {"port": self.zookeeper_port},
                 "brokers": {str(i): {"port": p} for i, p in sorted(self.broker_ports.items())},
                 "settings": self.settings, "broker_log_level": self.broker_log_level}
        tmp = self.root / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        os.replace(tmp, self.root / STATE_FILE)

    # -- where things are --------------------------------------------------------------------
    @property
    def zookeeper_dir(self) -> Path:
        return self.root / "zookeeper"

    def broker_dir(self, node_id: int) -> Path:
        return self.root / f"broker-{node_id}"

    @property
    def zookeeper_connect(self) -> str:
        return f"127.0.0.1:{self.zookeeper_port}{self.chroot}"

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for _i, port in sorted(self.broker_ports.items()))

    def zookeeper_pid(self) -> int | None:
        return detached.read_pid(self.zookeeper_dir / "zookeeper.pid")

    def broker_pid(self, node_id: int) -> int | None:
        return detached.read_pid(self.broker_dir(node_id) / "broker.pid")

    # -- up ----------------------------------------------------------------------------------
    def grow(self, brokers: int | None) -> None:
        """Make room for ``brokers`` brokers (ids 0..n-1); None keeps the stored count (3 for
        a new cluster). ClusterStateError for fewer than stored."""
        wanted = brokers if brokers is not None else (len(self.broker_ports) or 3)
        if wanted < len(self.broker_ports):
            raise ClusterStateError(
                f"{self.root} holds a cluster of {len(self.broker_ports)} brokers; stop it "
                f"(strom cluster down) and remove the directory to start one of {wanted}")
        for node_id in range(len(self.broker_ports), wanted):
            self.broker_ports[node_id] = 0

    def up(self, timeout: float) -> None:
        """Start whatever is not running, then wait until every broker serves."""
        if not detached.alive(self.zookeeper_pid(), ZOOKEEPER_MARKER):
            self.zookeeper_port = _port(self.zookeeper_port, set(self.broker_ports.values()))
            self.save()
            server = ZooKeeperServer(self.zookeeper_dir, port=self.zookeeper_port,
                                     detached=True)
            server.launch()
            assert server.pid is not None
            detached.write_pid(self.zookeeper_dir / "zookeeper.pid", server.pid)
            server.wait_serving(timeout)
            _progress(f"ZooKeeper (pid {server.pid}) serves on 127.0.0.1:{self.zookeeper_port}")
        session_s = int(self.settings.get("zookeeper.session.timeout.ms", 18000)) / 1000
        for node_id in sorted(self.broker_ports):
            if not detached.alive(self.broker_pid(node_id), BROKER_MARKER):
                wait_unregistered(self.zookeeper_connect, node_id, session_s + timeout)
                self._start_broker(node_id)
        wait_serving(lambda: [f"127.0.0.1:{p}" for p in self.broker_ports.values()],
                     len(self.broker_ports), timeout, check=self._check_brokers)

    def _start_broker(self, node_id: int) -> None:
        taken = {self.zookeeper_port} | {p for i, p in self.broker_ports.items() if i != node_id}
        port = self.broker_ports[node_id] = _port(self.broker_ports[node_id], taken)
        self.save()
        home = self.broker_dir(node_id)
        args = [sys.executable, "-m", "strom", "--log-level", self.broker_log_level, "broker",
                "--broker-id", str(node_id), "--zookeeper", self.zookeeper_connect,
                "--listen", f"127.0.0.1:{port}", "--data-dir", str(home / "data")]
        for key, value in sorted(self.settings.items()):
            args += ["--set", f"{key}={value}"]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        process = detached.spawn(args, home / "broker.log", home / "broker.pid", env=env)
        self._started[node_id] = process
        _progress(f"broker {node_id} (pid {process.pid}) starts on 127.0.0.1:{port}")

    def _check_brokers(self) -> None:
        for node_id in self.broker_ports:
            child = self._started.get(node_id)
            if (child.poll() is not None if child is not None
                    else not detached.alive(self.broker_pid(node_id), BROKER_MARKER)):
                log = self.broker_dir(node_id) / "broker.log"
                tail = "".join(log.read_text(errors="replace").splitlines(True)[-5:]) \
                    if log.exists() else ""
                raise ClusterStateError(f"broker {node_id} exited; the end of {log}:\n{tail}")

    # -- down / status -----------------------------------------------------------------------
    def down(self, timeout: float) -> None:
        """SIGTERM the brokers (SIGKILL after ``timeout``), then ZooKeeper; pid files go."""
        brokers = {pid: BROKER_MARKER for i in self.broker_ports
                   if (pid := self.broker_pid(i)) is not None}
        for pid in detached.stop(brokers, timeout):
            _progress(f"broker pid {pid} did not stop in {timeout:g}s: killed")
        zookeeper = self.zookeeper_pid()
        if zookeeper is not None:
            detached.stop({zookeeper: ZOOKEEPER_MARKER}, timeout)
        for node_id in self.broker_ports:
            (self.broker_dir(node_id) / "broker.pid").unlink(missing_ok=True)
        (self.zookeeper_dir / "zookeeper.pid").unlink(missing_ok=True)

    def status(self) -> list[ProcessStatus]:
        """One row per process: ZooKeeper first, then the brokers by id."""
        zk_pid = self.zookeeper_pid()
        zk_alive = detached.alive(zk_pid, ZOOKEEPER_MARKER)
        controller = None
        if zk_alive:
            try:
                controller = read_controller(self.zookeeper_connect, timeout=3.0)
            except TimeoutError:
                controller = None
        rows = [ProcessStatus("zookeeper", None, zk_pid, f"127.0.0.1:{self.zookeeper_port}",
                              zk_alive, False)]
        for node_id, port in sorted(self.broker_ports.items()):
            pid = self.broker_pid(node_id)
            rows.append(ProcessStatus("broker", node_id, pid, f"127.0.0.1:{port}",
                                      detached.alive(pid, BROKER_MARKER), controller == node_id))
        return rows


@dataclass(frozen=True)
class ProcessStatus:
    role: str
    node_id: int | None
    pid: int | None
    address: str
    alive: bool
    controller: bool


def status_table(rows: list[ProcessStatus]) -> str:
    """``ROLE ID PID ADDRESS ALIVE CONTROLLER`` columns, padded; ``-`` where nothing applies."""
    table = [("ROLE", "ID", "PID", "ADDRESS", "ALIVE", "CONTROLLER")] + [
        (r.role, "-" if r.node_id is None else str(r.node_id),
         "-" if r.pid is None else str(r.pid), r.address, "yes" if r.alive else "no",
         "-" if r.role != "broker" else "yes" if r.controller else "no") for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]) - 1)]
    return "".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False))
                   + "  " + row[-1] + "\n" for row in table)


def _port(previous: int, taken: set[int]) -> int:
    """``previous`` when it is set and free, else a free port not in ``taken``."""
    if previous and previous not in taken and port_is_free(previous):
        return previous
    while True:
        port = free_port()
        if port not in taken:
            return port


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
