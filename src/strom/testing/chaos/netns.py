"""Network partitions on one machine: each broker in a network namespace of its own, joined
by veth pairs to a bridge in the host namespace, where the test's clients and ZooKeeper stay.

Measured on the CI machine (root, no iptables / nft, no ``netem`` / ``prio`` qdiscs, no
``dummy`` links): what works and drops packets *silently* (as a cut cable, not as a refused
connection) is a permanent neighbour entry with a MAC address no one owns. The bridge floods
such frames and every namespace discards them, so connects time out and open connections
stall until their own timeouts. A blackhole route would fail ``connect`` at once instead.

Layout for a fabric with index ``k`` (chosen free at start, 10.231.k.0/24):

==================  ==========================================================================
``10.231.k.1``      the host side of the bridge ``schb<k>``: the test's clients connect from it
``10.231.k.2``      the services address: :meth:`NetworkFabric.forward` exposes host-loopback
                    services (ZooKeeper listens on 127.0.0.1) there through a TCP forwarder
``10.231.k.(10+n)`` broker ``n`` (0 ≤ n < 240) in namespace ``strom-chaos-<pid>-<k>-<n>``,
                    veth ``sch<k>r<n>`` (bridge side) / ``sch<k>n<n>`` (namespace side)
==================  ==========================================================================

:meth:`NetworkFabric.isolate` cuts a broker from the other brokers (both directions) and,
with ``zookeeper=True``, from the services address; :meth:`NetworkFabric.heal` removes the
entries. Clients in the host namespace always reach every broker. A fixture launches a
broker inside its namespace with :meth:`NetworkFabric.preexec` (``preexec_fn`` of
``subprocess.Popen``) and binds / advertises it on :meth:`NetworkFabric.host`.

:meth:`NetworkFabric.close` deletes everything (also run at interpreter exit);
:func:`remove_stale` deletes what crashed runs left behind (namespaces whose pid is gone).
Requires root (CAP_NET_ADMIN) and ``ip`` from iproute2; :func:`available` says whether,
:func:`unavailable_reason` why not.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import random
import re
import socket
import subprocess
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

NETNS_DIR = Path("/run/netns")
PREFIX = "strom-chaos"
#: a locally administered MAC address no interface has: frames to it are dropped.
NOWHERE_MAC = "02:de:ad:00:00:01"
CLONE_NEWNET = 0x40000000


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def unavailable_reason() -> str | None:
    """Why namespaces and veth pairs cannot be made here (None when they can): not root, no
    ``ip`` from iproute2, or ``ip netns add`` refused (e.g. in a container without
    CAP_SYS_ADMIN)."""
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN)"
    name = f"{PREFIX}-probe-{os.getpid()}"
    try:
        added = _ip("netns", "add", name, check=False)
    except FileNotFoundError:
        return "network namespaces need `ip` from iproute2"
    if added.returncode != 0:
        return f"`ip netns add` failed: {added.stderr.strip()}"
    _ip("netns", "del", name, check=False)
    return None


def available() -> bool:
    """Whether namespaces and veth pairs can be made here (root and iproute2)."""
    return unavailable_reason() is None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> list[str]:
    """Delete namespaces (and with them their veths) of fabrics whose process died; bridges
    of dead fabrics too. Returns what was removed."""
    removed: list[str] = []
    pattern = re.compile(rf"^{PREFIX}-(\d+)-(\d+)-\d+$")
    dead: set[int] = set()
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        match = pattern.match(name)
        if match and not _pid_alive(int(match.group(1))):
            _ip("netns", "del", name, check=False)
            dead.add(int(match.group(2)))
            removed.append(name)
    for line in _ip("-o", "link", "show", "type", "bridge", check=False).stdout.splitlines():
        match = re.search(r"\d+: (schb\d+)[:@].*alias (\S+)", line)
        owner = re.match(rf"{PREFIX}-(\d+)$", match.group(2)) if match else None
        if match and owner and not _pid_alive(int(owner.group(1))):
            _ip("link", "del", match.group(1), check=False)
            removed.append(match.group(1))
    return removed


def _used_indexes() -> set[int]:
    text = _ip("-o", "-4", "addr", "show", check=False).stdout
    used = {int(m) for m in re.findall(r"inet 10\.231\.(\d+)\.", text)}
    used |= {int(m) for m in re.findall(r"\d+: schb(\d+)", _ip("-o", "link", check=False).stdout)}
    return used


class TcpForwarder:
    """Accepts on ``listen`` and pipes each connection to ``target`` (threads; for control
    traffic such as ZooKeeper's, not for throughput)."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.target = target
        self.server = socket.create_server(listen, reuse_port=False)
        self.address: tuple[str, int] = self.server.getsockname()[:2]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="chaos-forwarder").start()

    def _accept(self) -> None:
        while True:
            try:
                client, _addr = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._closed:
                    client.close()
                    upstream.close()
                    return
                self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets, self._sockets = self._sockets, []
        self.server.close()
        for s in sockets:
            s.close()


class NetworkFabric:
    """A bridge, one namespace per broker, and the partitions currently applied.

    Not thread-safe: one owner (the test / the nemesis) calls it."""

    def __init__(self) -> None:
        used = _used_indexes()
        free = [k for k in range(1, 255) if k not in used]
        if not free:
            raise RuntimeError("no free 10.231.k.0/24 subnet for a chaos network")
        self.index = random.choice(free)
        self.bridge = f"schb{self.index}"
        self.nodes: dict[int, str] = {}  # node id → namespace name
        self.forwarders: list[TcpForwarder] = []
        #: (namespace, address) pairs whose neighbour entry is poisoned.
        self._cuts: set[tuple[int, str]] = set()
        self._closed = False
        _ip("link", "add", "name", self.bridge, "type", "bridge")
        _ip("link", "set", self.bridge, "alias", f"{PREFIX}-{os.getpid()}")
        for address in (self.client_address, self.services_address):
            _ip("addr", "add", f"{address}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        atexit.register(self.close)

    @property
    def client_address(self) -> str:
        return f"10.231.{self.index}.1"

    @property
    def services_address(self) -> str:
        return f"10.231.{self.index}.2"

    def host(self, node: int) -> str:
        """The address broker ``node`` binds and advertises."""
        return f"10.231.{self.index}.{10 + node}"

    def namespace(self, node: int) -> str:
        return self.nodes[node]

    def _device(self, node: int, side: str) -> str:
        return f"sch{self.index}{side}{node}"

    def add_node(self, node: int) -> str:
        """Create broker ``node``'s namespace and link; returns its address."""
        if not 0 <= node < 240:
            raise ValueError("node ids 0-239 fit the address plan")
        name = f"{PREFIX}-{os.getpid()}-{self.index}-{node}"
        outer, inner = self._device(node, "r"), self._device(node, "n")
        _ip("netns", "add", name)
        self.nodes[node] = name
        _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", name)
        _ip("link", "set", outer, "master", self.bridge)
        _ip("link", "set", outer, "up")
        _ip("-n", name, "addr", "add", f"{self.host(node)}/24", "dev", inner)
        _ip("-n", name, "link", "set", inner, "up")
        _ip("-n", name, "link", "set", "lo", "up")
        return self.host(node)

    def preexec(self, node: int) -> Callable[[], None]:
        """A ``preexec_fn`` that moves the child into ``node``'s namespace (libc's ``setns``
        is looked up here, before the fork, so the child only makes two system calls)."""
        setns = ctypes.CDLL(None, use_errno=True).setns
        path = str(NETNS_DIR / self.nodes[node])

        def enter() -> None:
            fd = os.open(path, os.O_RDONLY)
            try:
                if setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns {path}")
            finally:
                os.close(fd)

        return enter

    def forward(self, port: int, host: str = "127.0.0.1") -> str:
        """Expose ``host:port`` of the host namespace at ``services_address:port``; returns
        that address (as ``ip:port``)."""
        forwarder = TcpForwarder((self.services_address, port), (host, port))
        self.forwarders.append(forwarder)
        return f"{forwarder.address[0]}:{forwarder.address[1]}"

    def _cut(self, node: int, address: str) -> None:
        _ip("-n", self.nodes[node], "neigh", "replace", address, "lladdr", NOWHERE_MAC,
            "dev", self._device(node, "n"), "nud", "permanent")
        self._cuts.add((node, address))

    def isolate(self, node: int, *, peers: Iterable[int] | None = None,
                zookeeper: bool = False) -> None:
        """Drop all traffic between ``node`` and ``peers`` (default: every other broker), and
        from ``node`` to the services address (ZooKeeper) when ``zookeeper``."""
        for peer in (self.nodes if peers is None else peers):
            if peer != node:
                self._cut(node, self.host(peer))
                self._cut(peer, self.host(node))
        if zookeeper:
            self._cut(node, self.services_address)

    def heal(self, node: int | None = None) -> None:
        """Remove every cut (or only those in and towards ``node``'s namespace)."""
        for cut_node, address in sorted(self._cuts):
            if node is None or cut_node == node or address == self.host(node):
                _ip("-n", self.nodes[cut_node], "neigh", "del", address, "dev",
                    self._device(cut_node, "n"), check=False)
                self._cuts.discard((cut_node, address))

    @property
    def cuts(self) -> frozenset[tuple[int, str]]:
        return frozenset(self._cuts)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for forwarder in self.forwarders:
            forwarder.close()
        for name in self.nodes.values():
            _ip("netns", "del", name, check=False)
        _ip("link", "del", self.bridge, check=False)
        atexit.unregister(self.close)

    def __enter__(self) -> NetworkFabric:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
