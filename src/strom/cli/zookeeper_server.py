"""A ZooKeeper server as a child JVM: what ``strom cluster up`` runs (and what
:mod:`strom.testing.zookeeper` builds its test servers and ensembles on).

    server = ZooKeeperServer(Path("zk"), port=2181).start()   # waits until it answers ruok
    server.connect                                            # "127.0.0.1:2181"

The server is Debian's ``zookeeper`` package (3.8, ``/usr/share/java/zookeeper.jar``) started
directly with ``java`` (Debian's start script writes no log); its log goes to ``zookeeper.log``
in the data dir, its config is ``zoo.cfg`` there and its snapshots ``data/``. ``tickTime`` is
200 ms so a session of 1 s expires in about a second; the admin server is off and only the
``ruok`` / ``srvr`` four-letter words are enabled. A server counts as up once it answers
``ruok`` with ``imok``; a member of an ensemble, once ``srvr`` reports a mode (leader /
follower). ``detached=True`` starts the JVM in a session of its own, so it outlives the
process that started it (and a Ctrl-C in that terminal).

:func:`zookeeper_available` tells whether java and the jars are installed.
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

from strom.common.errors import StromError

JAVA_DIR = Path("/usr/share/java")
#: The jars a 3.8 server needs (slf4j-simple logs to the process's stderr).
JARS = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-simple.jar",
        "metrics-core.jar", "commons-io.jar", "commons-cli.jar", "snappy-java.jar",
        "netty-handler.jar", "netty-common.jar", "netty-buffer.jar", "netty-transport.jar",
        "netty-codec.jar", "netty-resolver.jar", "netty-transport-native-epoll.jar",
        "netty-transport-native-unix-common.jar")
TICK_MS = 200


class ZooKeeperStartError(StromError):
    """The server could not be started (not installed, exited, or not serving in time): a
    one-line message for the CLI, never a traceback."""


def zookeeper_available() -> bool:
    """Whether a server can be started here (java and Debian's zookeeper jars)."""
    return shutil.which("java") is not None and (JAVA_DIR / "zookeeper.jar").exists()


def free_port() -> int:
    """A loopback port free right now (the OS picks it; nothing holds it afterwards)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    """Whether ``127.0.0.1:port`` can be bound now."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


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
                 server_id: int = 0, peers: dict[int, tuple[int, int]] | None = None,
                 detached: bool = False) -> None:
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="strom-zk-"))
        self.port = port or free_port()
        self.server_id = server_id
        self.peers = peers
        self.detached = detached
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        """The connect string of this server alone: ``127.0.0.1:<port>``."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

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
        if not zookeeper_available():
            raise ZooKeeperStartError(
                f"ZooKeeper cannot start here: it needs java and Debian's zookeeper package "
                f"({JAVA_DIR / 'zookeeper.jar'}); install it with apt-get install zookeeper")
        config = self._write_config()
        classpath = os.pathsep.join(str(JAVA_DIR / jar) for jar in JARS)
        main = ("org.apache.zookeeper.server.quorum.QuorumPeerMain" if self.peers
                else "org.apache.zookeeper.server.ZooKeeperServerMain")
        with open(self.log_path, "ab") as out:
            self._process = subprocess.Popen(
                ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                 "-cp", classpath, main, str(config)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=self.detached)

    def serving(self) -> bool:
        if self.peers:
            return "Mode: " in four_letter_word(self.port, "srvr")
        return four_letter_word(self.port, "ruok") == "imok"

    def wait_serving(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.serving():
            if self._process is not None and self._process.poll() is not None:
                raise ZooKeeperStartError(
                    f"ZooKeeper exited ({self._process.returncode}); see {self.log_path}")
            if time.monotonic() > deadline:
                raise ZooKeeperStartError(
                    f"ZooKeeper on port {self.port} did not serve in {timeout}s")
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
