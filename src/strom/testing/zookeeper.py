"""Real ZooKeeper servers for tests: a standalone server (or a small ensemble) as a child JVM.

    with ZooKeeperServer() as zk:          # a free loopback port, a temporary data dir
        store = ZooKeeperMetadataStore(zk.connect + "/strom-test")

The server is Debian's ``zookeeper`` package (3.8, ``/usr/share/java/zookeeper.jar``) started
directly with ``java`` (Debian's start script writes no log); its log goes to ``zookeeper.log``
in the data dir. ``tickTime`` is 200 ms so a session of 1 s expires in about a second; the
admin server is off and only the ``ruok`` / ``srvr`` four-letter words are enabled. A server
counts as up once it answers ``ruok`` with ``imok``; for an ensemble, once ``srvr`` reports a
mode (leader / follower) on every member.

:func:`zookeeper_available` tells whether java and the jars are installed (tests skip
otherwise). :func:`expire_session` ends a kazoo client's session the way ZooKeeper's own tests
do: a second client joins the same session and closes it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

JAVA_DIR = Path("/usr/share/java")
#: The jars a 3.8 server needs (slf4j-simple logs to the process's stderr).
JARS = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-simple.jar",
        "metrics-core.jar", "commons-io.jar", "commons-cli.jar", "snappy-java.jar",
        "netty-handler.jar", "netty-common.jar", "netty-buffer.jar", "netty-transport.jar",
        "netty-codec.jar", "netty-resolver.jar", "netty-transport-native-epoll.jar",
        "netty-transport-native-unix-common.jar")
TICK_MS = 200


def zookeeper_available() -> bool:
    """Whether a server can be started here (java and Debian's zookeeper jars)."""
    return shutil.which("java") is not None and (JAVA_DIR / "zookeeper.jar").exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def four_letter_word(port: int, word: str, timeout: float = 1.0) -> str:
    """Send a four-letter command to the server at ``port``; its answer ('' on failure)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(word.encode())
            chunks = []
            while chunk := s.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class ZooKeeperServer:
    """One ZooKeeper server process. ``peers`` (server id → (quorum port, election port))
    makes it a member of an ensemble with the given ``server_id``; without it, standalone.

    Lifecycle: :meth:`start` (waits until it serves), :meth:`stop` (kill), :meth:`pause` /
    :meth:`resume` (SIGSTOP / SIGCONT), :meth:`close` (stop and remove a temporary dir).
    The port and data dir survive a stop, so :meth:`start` again is a restart."""

    def __init__(self, data_dir: str | Path | None = None, *, port: int | None = None,
                 server_id: int = 0, peers: dict[int, tuple[int, int]] | None = None) -> None:
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="strom-zk-"))
        self.port = port or free_port()
        self.server_id = server_id
        self.peers = peers
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        """The connect string of this server alone: ``127.0.0.1:<port>``."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def _write_config(self) -> Path:
        data = self.data_dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        lines = [f"tickTime={TICK_MS}", f"dataDir={data}", f"clientPort={self.port}",
                 "clientPortAddress=127.0.0.1", "admin.enableServer=false",
                 "4lw.commands.whitelist=ruok,srvr", "initLimit=20", "syncLimit=10",
                 "minSessionTimeout=400", "maxSessionTimeout=60000"]
        if self.peers:
            (data / "myid").write_text(f"{self.server_id}\n")
            lines += [f"server.{sid}=127.0.0.1:{quorum}:{election}"
                      for sid, (quorum, election) in sorted(self.peers.items())]
        config = self.data_dir / "zoo.cfg"
        config.write_text("\n".join(lines) + "\n")
        return config

    def launch(self) -> None:
        """Start the JVM without waiting for it to serve (an ensemble starts all first)."""
        if self._process is not None and self._process.poll() is None:
            return
        config = self._write_config()
        classpath = os.pathsep.join(str(JAVA_DIR / jar) for jar in JARS)
        main = ("org.apache.zookeeper.server.quorum.QuorumPeerMain" if self.peers
                else "org.apache.zookeeper.server.ZooKeeperServerMain")
        with open(self.data_dir / "zookeeper.log", "ab") as out:
            self._process = subprocess.Popen(
                ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                 "-cp", classpath, main, str(config)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def serving(self) -> bool:
        if self.peers:
            return "Mode: " in four_letter_word(self.port, "srvr")
        return four_letter_word(self.port, "ruok") == "imok"

    def wait_serving(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.serving():
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited ({self._process.returncode}); see "
                                   f"{self.data_dir / 'zookeeper.log'}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"ZooKeeper on port {self.port} did not serve in {timeout}s")
            time.sleep(0.05)

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        self.launch()
        self.wait_serving(timeout)
        return self

    def stop(self) -> None:
        """Kill the server (SIGKILL: as a crash; the data dir stays)."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGCONT)
            self._process.kill()
        self._process.wait()
        self._process = None

    def pause(self) -> None:
        assert self._process is not None
        self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self._process is not None
        self._process.send_signal(signal.SIGCONT)

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class ZooKeeperEnsemble:
    """``size`` servers on loopback forming one ensemble (a quorum is ``size // 2 + 1``)."""

    def __init__(self, size: int = 3) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="strom-zk-ensemble-"))
        peers = {sid: (free_port(), free_port()) for sid in range(1, size + 1)}
        self.servers = [ZooKeeperServer(self.root / f"zk{sid}", server_id=sid, peers=peers)
                        for sid in peers]

    @property
    def connect(self) -> str:
        return ",".join(server.connect for server in self.servers)

    def start(self, timeout: float = 60.0) -> ZooKeeperEnsemble:
        for server in self.servers:
            server.launch()
        for server in self.servers:
            server.wait_serving(timeout)
        return self

    def close(self) -> None:
        for server in self.servers:
            server.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> ZooKeeperEnsemble:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def expire_session(client: object, connect: str, timeout: float = 10.0) -> None:
    """Expire the session of kazoo ``client`` (a ``KazooClient``) on the server at ``connect``:
    another client joins the session with its id and password and closes it."""
    from kazoo.client import KazooClient

    session_id, password = client.client_id  # type: ignore[attr-defined]
    twin = KazooClient(hosts=connect, client_id=(session_id, password), timeout=1.0)
    twin.start(timeout=timeout)
    twin.stop()
    twin.close()
