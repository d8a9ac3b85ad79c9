"""One listener's accept loop (Kafka's ``Acceptor``), paced by the connection creation rate
quotas of :mod:`strom.broker.connection_rates`.

asyncio's own server accepts whatever arrives; a broker over ``max.connection.creation.rate``
must instead stop accepting for a while (the connections waiting stay in the kernel's backlog,
as with Kafka), so the listener's sockets are bound here and accepted from by this class
(registered for reading with ``loop.add_reader``). Per accepted connection, in Kafka's order:

1. the broker and listener rates: over a bound, the socket stops being read for the throttle
   time (at most one quota window) — the connection just accepted goes on after it;
2. the IP rate: over its bound, the connection is held open unread for the throttle time,
   then closed without being served (at most :data:`MAX_HELD` are held; beyond, one is closed
   at once);
3. served: handed to asyncio (``connect_accepted_socket``: the TLS handshake on TLS listeners,
   bounded by ``handshake_timeout_s``), then to the protocol, which applies the connection
   count limits (:mod:`strom.broker.connection_limits`).

Binding follows ``loop.create_server``: every address ``host`` resolves to (all interfaces for
an empty host), ``SO_REUSEADDR``, IPv6 sockets IPv6-only. Running out of file descriptors
while accepting pauses that socket's loop for a second (as asyncio's server does), logged
rate-limited. Owned by the event-loop thread: :meth:`Acceptor.start` after binding,
:meth:`close` then :meth:`wait_closed` at shutdown (accepting stops at once; handshakes in
progress are cancelled). Measured (``bench/hostile_clients_bench.py connections``): the
broker's CPU per connection is that of asyncio's own server within noise.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import ssl
from collections.abc import Callable

from strom.broker.connection_rates import ConnectionRates
from strom.common.rate_limited_log import RateLimitedLog

log = logging.getLogger("strom.broker.network")

#: Connections held (unread, to be closed) for being over their IP's rate, at most.
MAX_HELD = 1000
#: Connections accepted per wake-up at most (asyncio's server takes its backlog's worth).
ACCEPT_BATCH = 100
RESOURCE_RETRY_S = 1.0
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


async def bind(host: str, port: int, backlog: int) -> list[socket.socket]:
    """Listening, non-blocking sockets on every address of ``host`` (all interfaces when
    empty); OSError when one cannot be bound (none is left open)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host or None, port, family=socket.AF_UNSPEC,
                                   type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class Acceptor:
    """Accepts connections on one listener's sockets; see the module doc.

    Each listening socket stays registered for reading while accepting (as asyncio's server
    does: no registration per connection); a pause unregisters it until a timer puts it
    back."""

    def __init__(self, sockets: list[socket.socket], listener: str,
                 protocol_factory: Callable[[], asyncio.Protocol],
                 rates: ConnectionRates, ssl_context: ssl.SSLContext | None = None,
                 handshake_timeout_s: float | None = None) -> None:
        self.sockets = sockets
        self._listener = listener
        self._factory = protocol_factory
        self._rates = rates
        self._ssl = ssl_context
        self._handshake_timeout = handshake_timeout_s if ssl_context is not None else None
        self._loop: asyncio.AbstractEventLoop | None = None
        # listening socket → (timer, connection to go on with after the pause, its address)
        self._paused: dict[socket.socket,
                           tuple[asyncio.TimerHandle, socket.socket | None, str]] = {}
        self._handshakes: set[asyncio.Task[object]] = set()
        self._held: dict[socket.socket, asyncio.TimerHandle] = {}
        self._closed = False
        self._errors = RateLimitedLog(log, logging.ERROR)
        self._throttled = RateLimitedLog(log, logging.INFO)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        for sock in self.sockets:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def _accept(self, sock: socket.socket) -> None:
        """Accept what is waiting (at most a backlog's worth per wake-up)."""
        for _ in range(ACCEPT_BATCH):
            try:
                conn, address = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    self._errors.log("listener %s cannot accept connections: %s; retrying in "
                                     "%.0f s", self._listener, exc.strerror, RESOURCE_RETRY_S)
                    self._pause(sock, RESOURCE_RETRY_S, None, "")
                    return
                continue  # ECONNABORTED and the like: that connection is gone
            conn.setblocking(False)
            ip = str(address[0]) if isinstance(address, tuple) else "?"
            delay = self._rates.accept_delay(self._listener)
            if delay > 0:
                self._throttled.log("listener %s: connections arrive faster than "
                                    "max.connection.creation.rate; accepting paused for %.0f ms",
                                    self._listener, delay * 1000)
                self._pause(sock, delay, conn, ip)
                return
            self._admit(conn, ip)

    def _pause(self, sock: socket.socket, seconds: float, conn: socket.socket | None,
               ip: str) -> None:
        """Stop accepting on ``sock`` for ``seconds``; ``conn`` (accepted, from ``ip``) goes
        on after."""
        assert self._loop is not None
        self._loop.remove_reader(sock.fileno())
        self._paused[sock] = (self._loop.call_later(seconds, self._resume, sock), conn, ip)

    def _resume(self, sock: socket.socket) -> None:
        _timer, conn, ip = self._paused.pop(sock)
        if conn is not None:
            self._admit(conn, ip)
        if not self._closed:
            assert self._loop is not None
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def _admit(self, conn: socket.socket, ip: str) -> None:
        """The IP's rate, then serve ``conn``."""
        throttle = self._rates.ip_throttle(self._listener, ip)
        if throttle > 0:
            self._throttled.log("connection from %s over its connection_creation_rate "
                                "quota: closed unserved after %.0f ms", ip, throttle * 1000)
            self._hold(conn, throttle)
            return
        assert self._loop is not None
        task = asyncio.ensure_future(self._loop.connect_accepted_socket(
            self._factory, conn, ssl=self._ssl, ssl_handshake_timeout=self._handshake_timeout))
        self._handshakes.add(task)
        task.add_done_callback(self._handshake_done)

    def _hold(self, conn: socket.socket, seconds: float) -> None:
        """Keep ``conn`` open, unread, for ``seconds``; then close it."""
        if len(self._held) >= MAX_HELD:
            conn.close()
            return
        assert self._loop is not None
        self._held[conn] = self._loop.call_later(seconds, self._release, conn)

    def _release(self, conn: socket.socket) -> None:
        self._held.pop(conn, None)
        conn.close()

    def _handshake_done(self, task: asyncio.Task[object]) -> None:
        self._handshakes.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        if isinstance(exc, OSError | ssl.SSLError | TimeoutError | EOFError):
            log.debug("listener %s: connection setup failed: %s", self._listener, exc)
        else:
            self._errors.log("listener %s: unexpected error setting up a connection",
                             self._listener, exc_info=exc)

    def close(self) -> None:
        """Stop accepting: the listening sockets close; held connections are closed."""
        self._closed = True
        loop = self._loop
        for sock in self.sockets:
            if loop is not None and sock not in self._paused and sock.fileno() >= 0:
                loop.remove_reader(sock.fileno())
            sock.close()
        for timer, conn, _ip in self._paused.values():
            timer.cancel()
            if conn is not None:
                conn.close()
        self._paused.clear()
        for conn, timer in list(self._held.items()):
            timer.cancel()
            conn.close()
        self._held.clear()

    async def wait_closed(self) -> None:
        """Connections still in their TLS handshake are cancelled and awaited."""
        for task in self._handshakes:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._handshakes, return_exceptions=True)
