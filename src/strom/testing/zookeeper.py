"""Real ZooKeeper servers for tests: a standalone server (or a small ensemble) as a child JVM.

    with ZooKeeperServer() as zk:          # a free loopback port, a temporary data dir
        store = ZooKeeperMetadataStore(zk.connect + "/strom-test")

The server itself is the product's launcher (:mod:`strom.cli.zookeeper_server`, which
``strom cluster up`` runs): Debian's ``zookeeper`` package started with ``java``,
``tickTime=200``, its log in ``zookeeper.log`` in the data dir. An ensemble counts as up once
``srvr`` reports a mode (leader / follower) on every member.

:func:`zookeeper_available` tells whether java and the jars are installed (tests skip
otherwise). :func:`expire_session` ends a kazoo client's session the way ZooKeeper's own tests
do: a second client joins the same session and closes it.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from types import TracebackType

from strom.cli.zookeeper_server import (
    JARS,
    JAVA_DIR,
    TICK_MS,
    ZooKeeperServer,
    four_letter_word,
    free_port,
    zookeeper_available,
)

__all__ = ["JARS", "JAVA_DIR", "TICK_MS", "ZooKeeperEnsemble", "ZooKeeperServer",
           "expire_session", "four_letter_word", "free_port", "zookeeper_available"]


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
