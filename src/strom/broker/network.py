"""The asyncio network layer: one :class:`KafkaConnection` protocol object per client socket,
all of a listener's in one :class:`Connections`.

Requests on a connection are answered in order and, as Kafka does, processed one at a time
(a parked Fetch holds the connection's later requests back), with one exception taken from
Redpanda's two-phase handlers: a Produce whose records are appended and that waits only for
its acknowledgements (:class:`~strom.broker.dispatch.Dispatched`) lets the connection's next
Produce be processed meanwhile, up to :data:`MAX_PIPELINED` of them. Appends still happen in
request order and the answers go out in it; a request of any other kind waits until all of
them are answered. Served one at a time, an acks=all producer's pipelined requests queued
behind each other for as long as a replication round was slower than their spacing (a
healthy producer's p99 rose to hundreds of milliseconds while a cluster busy creating topics
made its rounds a few milliseconds slower: docs/benchmarks.md).

Backpressure: reading pauses while too many frames wait, while the transport's write buffer
is above its high-water mark, and while the request memory of all connections is exhausted
(``queued.max.request.bytes``, see :mod:`strom.broker.request_memory`).

Limits against hostile or broken clients: a frame above ``socket.request.max.bytes`` closes
the connection before anything is buffered (Kafka does the same); a frame's buffer grows with
the bytes that arrive, never with the size announced; a connection without traffic for
``connections.max.idle.ms`` is closed, whether it is between requests (Kafka's rule) or has
stopped in the middle of one — time spent waiting on the broker (a request being processed,
reading paused for memory between frames) does not count; while the request memory is
exhausted, connections whose incomplete frames have stalled are closed at once to get it back
(see :mod:`strom.broker.request_memory`). Rejections are logged rate-limited, so an attack
cannot flood the log.

Responses are lists of parts. Small file regions are read with ``os.pread`` and written with
the rest; large ones go out with ``loop.sendfile`` (``os.sendfile`` on plain TCP), so record
bytes are never copied through Python objects. Through TLS there is no sendfile (the kernel
cannot encrypt): large regions are read with ``os.pread`` in 256 KiB chunks, waiting for the
transport to drain between them.

A connection belongs to one listener (:class:`~strom.broker.security.runtime.ListenerRuntime`):
on TLS listeners asyncio completes the handshake before ``connection_made`` (a client that
fails it never reaches the dispatcher), the principal comes from the client certificate, and
on SASL listeners the connection gets its SASL session. A response flagged
``close_after_response`` (a refused SASL handshake or authentication) is written, then
nothing more is read and the connection is closed shortly after.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections import deque
from collections.abc import Awaitable, Iterator
from typing import Any

from strom.broker.connection_limits import ConnectionLimits
from strom.broker.dispatch import (
    CloseConnection,
    ConnectionContext,
    Dispatched,
    Dispatcher,
    ResponseParts,
)
from strom.broker.request_memory import RequestMemoryPool
from strom.broker.security.principal import NoMatchingRule
from strom.broker.security.runtime import ListenerRuntime
from strom.common.rate_limited_log import RateLimitedLog
from strom.protocol.frame import FrameDecoder, FrameTooLargeError
from strom.protocol.versions import ApiKey

log = logging.getLogger("strom.broker.network")

MAX_QUEUED_FRAMES = 64
#: Produce requests of one connection waiting for their acknowledgements at once (two-phase
#: processing); the next one waits until one is answered.
MAX_PIPELINED = 16
_PRODUCE = int(ApiKey.PRODUCE)
SENDFILE_THRESHOLD = 256 * 1024
TLS_CHUNK = 256 * 1024
LAST_RESPONSE_GRACE_S = 0.5


class Connections:
    """The open connections of one listener and what they share: the request memory pool,
    the idle timeout and the rate-limited log of rejected connections. Owned by the server."""

    def __init__(self, pool: RequestMemoryPool, idle_timeout_s: float | None,
                 limits: ConnectionLimits | None = None) -> None:
        self.pool = pool
        self.limits = limits
        self.idle_timeout_s = idle_timeout_s
        self.rejected = RateLimitedLog(log, logging.WARNING)
        self.failed = RateLimitedLog(log, logging.ERROR)
        self._open: dict[KafkaConnection, None] = {}

    def __iter__(self) -> Iterator[KafkaConnection]:
        return iter(list(self._open))

    def admit(self, connection: KafkaConnection, listener: str | None, ip: str) -> bool:
        """Count a new connection against the limits; False (and logged) when refused."""
        limits = self.limits
        if limits is None:
            return True
        refusal = limits.refusal(listener, ip)
        if refusal is not None:
            self.rejected.log("refusing a connection from %s: %s", ip, refusal)
            return False
        limits.opened(listener, ip)
        connection.counted = (listener, ip)
        return True

    def add(self, connection: KafkaConnection) -> None:
        self._open[connection] = None
        self.pool.register(connection)

    def discard(self, connection: KafkaConnection) -> None:
        self._open.pop(connection, None)
        self.pool.unregister(connection)
        counted = connection.counted
        if counted is not None and self.limits is not None:
            connection.counted = None
            self.limits.closed(*counted)

    def close_idle(self, now: float) -> int:
        """Close every connection idle for longer than the timeout; return how many."""
        if self.idle_timeout_s is None:
            return 0
        cutoff = now - self.idle_timeout_s
        closed = 0
        for connection in list(self._open):
            if connection.idle_since(now) < cutoff:
                log.debug("closing %s: no traffic for %.0f s%s", connection.context.peer,
                          now - connection.idle_since(now),
                          " in the middle of a request" if connection.mid_frame else "")
                connection.close()
                closed += 1
        return closed


class KafkaConnection(asyncio.Protocol):
    """Owns one client socket; created by the server's listener, lives until the socket closes.

    Memory it holds (reported to the pool): the buffer of the frame being read, the frames
    queued, and the frame whose request is being processed until that request completes."""

    def __init__(self, dispatcher: Dispatcher, max_request_size: int,
                 connections: Connections, listener: ListenerRuntime | None = None) -> None:
        self._listener = listener
        self._dispatcher = dispatcher
        self._decoder = FrameDecoder(max_request_size)
        self._queue: deque[memoryview] = deque()
        self._queued_bytes = 0
        #: Requests being processed or answered, in request order: (task, frame bytes,
        #: dispatched). Several only while each has taken effect (two-phase Produce).
        self._inflight: deque[tuple[asyncio.Task[None], int, bool]] = deque()
        self._inflight_bytes = 0
        self._inflight_dispatched = 0
        self._frames_read = 0
        self._write_paused = False
        self._read_paused = False
        self._closed = False
        self._muted = False
        self._connections = connections
        self._pool = connections.pool
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._last_active = self._loop.time()
        self._last_byte = self._last_active
        self.context = ConnectionContext(peer="?")
        #: (listener, ip) this connection is counted under in the connection limits.
        self.counted: tuple[str | None, str] | None = None
        self._tls = False
        self._writable: asyncio.Future[None] | None = None

    @property
    def busy(self) -> bool:
        """A request is being processed (or its response is being sent)."""
        return bool(self._inflight)

    @property
    def mid_frame(self) -> bool:
        return self._decoder.in_frame

    @property
    def frame_progress(self) -> float:
        """When the last byte arrived (of the incomplete frame, when one is being read)."""
        return self._last_byte

    def reclaim(self, reason: str) -> None:
        """Closed by the request memory pool to get back the memory a stalled frame holds
        (the pool logs a summary, rate-limited)."""
        log.debug("closing %s: %s", self.context.peer, reason)
        self.close()

    def idle_since(self, now: float) -> float:
        """When the connection last made progress; ``now`` while it waits on the broker.

        Waiting for a request to be processed, or between frames for request memory, is not
        idling. A frame left incomplete is charged from its last byte even while reading is
        paused for memory: the frames holding the memory are then all released within one
        timeout, instead of one after the other as each in turn is the only one read."""
        if (self._inflight and not self._write_paused) or self._muted:
            return now
        if self._read_paused and not self._decoder.in_frame and not self._pool.may_read(self):
            return now
        return self._last_active

    # -- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        self.context.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        listener = self._listener
        if not self._connections.admit(self, listener.name if listener else None,
                                       peer[0] if peer else "?"):
            self._closed = True
            transport.abort()
            return
        if listener is not None:  # connection_made comes after the TLS handshake
            self.context.listener = listener.name
            try:
                self.context.principal = listener.principal(
                    transport.get_extra_info("peercert"))
            except NoMatchingRule as exc:
                self._connections.add(self)
                self._reject(str(exc))
                return
            self.context.sasl = listener.sasl_session(self.context.peer)
            self._tls = listener.ssl_context is not None
        self._connections.add(self)
        self._update_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._writable is not None and not self._writable.done():
            self._writable.cancel()
        self._queue.clear()
        self._connections.discard(self)
        for task, _, _ in list(self._inflight):
            task.cancel()

    def data_received(self, data: bytes) -> None:
        self._last_active = self._last_byte = self._loop.time()
        try:
            frames = self._decoder.feed(data)
        except FrameTooLargeError as exc:
            self._reject(str(exc))
            return
        if frames:
            self._frames_read += len(frames)
            self._queue.extend(frames)
            self._queued_bytes += sum(len(f) for f in frames)
        self._process()  # ends by reporting the memory held (_account)

    def memory_state_changed(self) -> None:
        self._update_reading()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._process()

    # -- processing -------------------------------------------------------------------------
    def _process(self) -> None:
        while (self._queue and not self._write_paused and not self._closed
               and not self._muted and self._may_start(self._queue[0])):
            frame = self._queue.popleft()
            self._queued_bytes -= len(frame)
            try:
                result = self._dispatcher.dispatch(self.context, frame)
                before = self._inflight[-1][0] if self._inflight else None
                if result is None:
                    pass
                elif isinstance(result, list):
                    if before is not None:  # sent after the answers still to come
                        self._start(self._await_result(_ready(result), before), len(frame),
                                    True)
                    elif not self._send(result):
                        self._start(self._send_async(result), len(frame), False)
                    elif self.context.close_after_response:
                        self._close_soon()
                        return
                else:
                    self._start(self._await_result(result, before), len(frame),
                                isinstance(result, Dispatched))
            except CloseConnection as exc:
                self._reject(str(exc))
                return
            except Exception as exc:
                self._fail(exc)
                return
            if not self._inflight:
                self._mute_if_throttled()
        self._account()

    def _may_start(self, frame: memoryview) -> bool:
        """Whether ``frame`` may be processed now: when nothing is in flight, or when it is
        a Produce and every request in flight has taken effect (:class:`Dispatched`), up to
        :data:`MAX_PIPELINED` of them."""
        inflight = len(self._inflight)
        if not inflight:
            return True
        sasl = self.context.sasl
        return (inflight == self._inflight_dispatched and inflight < MAX_PIPELINED
                and len(frame) >= 2 and frame[0] == 0 and frame[1] == _PRODUCE
                and (sasl is None or not sasl.raw_tokens))

    def _mute_if_throttled(self) -> None:
        """After a throttled response: read and serve nothing for the throttle time."""
        mute_s = self.context.mute_s
        if mute_s <= 0 or self._closed:
            return
        self.context.mute_s = 0.0
        self._muted = True
        self._update_reading()
        self._loop.call_later(mute_s, self._unmute)

    def _unmute(self) -> None:
        self._muted = False
        self._last_active = self._loop.time()
        self._update_reading()
        self._process()

    def _account(self) -> None:
        """Report the memory held to the pool, and pause or resume reading accordingly."""
        if self._closed:
            return
        decoder = self._decoder
        usage = decoder.pending + self._queued_bytes + self._inflight_bytes
        self._pool.update(self, usage, frame=self._frames_read if decoder.in_frame else None)
        self._update_reading()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or self._closed:
            return
        should_pause = (len(self._queue) >= MAX_QUEUED_FRAMES or self._muted
                        or not self._pool.may_read(self))
        if should_pause and not self._read_paused:
            transport.pause_reading()
            self._read_paused = True
        elif not should_pause and self._read_paused:
            transport.resume_reading()
            self._read_paused = False
            if not self._decoder.in_frame:
                self._last_active = self._loop.time()  # waiting on the broker is not idling

    def _start(self, coro: Awaitable[None], size: int, dispatched: bool) -> None:
        task = asyncio.ensure_future(coro)
        self._inflight.append((task, size, dispatched))
        self._inflight_bytes += size
        self._inflight_dispatched += dispatched
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        for i, (t, size, dispatched) in enumerate(self._inflight):
            if t is task:
                del self._inflight[i]
                self._inflight_bytes -= size
                self._inflight_dispatched -= dispatched
                break
        self._last_active = self._loop.time()
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            if isinstance(exc, CloseConnection):
                self._reject(str(exc))
            elif isinstance(exc, ConnectionError):
                self.close()
            else:
                self._fail(exc)
            return
        self._mute_if_throttled()
        self._process()

    def _reject(self, reason: str) -> None:
        """Close a connection whose client broke the protocol (rate-limited WARNING)."""
        self._connections.rejected.log("closing %s: %s", self.context.peer, reason)
        self.close()

    def _fail(self, exc: BaseException) -> None:
        """Close after an unexpected error (rate-limited ERROR with the traceback)."""
        self._connections.failed.log("unexpected error serving %s; closing it",
                                     self.context.peer, exc_info=exc)
        self.close()

    async def _await_result(self, pending: Awaitable[ResponseParts | None],
                            before: asyncio.Task[None] | None) -> None:
        """Await the answer, then send it once the answer of the request ``before`` (and
        so every earlier one) has gone."""
        parts = await pending
        if before is not None and not before.done():
            await asyncio.wait((before,))  # its failure closes the connection first
        if parts is not None and not self._closed and not self._send(parts):
            await self._send_async(parts)
        if self.context.close_after_response:
            self._close_soon()

    def _send(self, parts: ResponseParts) -> bool:
        """Write a response synchronously if it has no large file region; False otherwise."""
        transport = self._transport
        if transport is None or self._closed:
            return True
        chunks: list[bytes | memoryview] = []
        region_bytes = 0
        for part in parts:
            if not isinstance(part, bytes | memoryview | bytearray):
                region_bytes += part.size
        if region_bytes >= SENDFILE_THRESHOLD:
            return False
        for part in parts:
            if isinstance(part, bytes | memoryview | bytearray):
                chunks.append(part)
            else:
                chunks.append(_pread_region(part))
        transport.write(b"".join(chunks) if len(chunks) > 1 else chunks[0])
        self._last_active = self._loop.time()
        return True

    async def _send_async(self, parts: ResponseParts) -> None:
        transport = self._transport
        if transport is None or self._closed:
            return
        loop = asyncio.get_running_loop()
        pending: list[bytes | memoryview] = []
        for part in parts:
            if isinstance(part, bytes | memoryview | bytearray):
                pending.append(part)
                continue
            if part.size < SENDFILE_THRESHOLD // 4:
                pending.append(_pread_region(part))
                continue
            if pending:
                transport.write(b"".join(pending))
                pending = []
            if self._tls:
                await self._write_region_tls(part)
            else:
                await loop.sendfile(transport, part.file, part.position, part.size)  # type: ignore[attr-defined]
        if pending:
            transport.write(b"".join(pending))
        self._last_active = self._loop.time()

    async def _write_region_tls(self, region: Any) -> None:
        """A file region through TLS: no sendfile (the bytes must be encrypted), so read it
        in chunks with ``os.pread`` — never the shared file position, which asyncio's own
        sendfile fallback moves — and wait while the transport's buffer is full."""
        transport = self._transport
        assert transport is not None
        fd = region.file.fileno()
        done = 0
        while done < region.size and not self._closed:
            size = min(TLS_CHUNK, region.size - done)
            data = os.pread(fd, size, region.position + done)
            if len(data) < size:
                raise CloseConnection("file region shrank while being sent")
            transport.write(data)
            done += size
            if self._write_paused:
                self._writable = self._loop.create_future()
                await self._writable

    def _close_soon(self) -> None:
        """Close after a last response: nothing more is read or served, and the socket is
        closed when the client closes it or after :data:`LAST_RESPONSE_GRACE_S`. Closing at
        once raced the client's read under TLS: a close_notify right behind the response
        made kafka-python drop the response it had not parsed yet."""
        self._queue.clear()
        self._closed = True
        self._connections.discard(self)
        if self._transport is not None:
            self._transport.pause_reading()
            self._loop.call_later(LAST_RESPONSE_GRACE_S, self._transport.close)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._queue.clear()
            self._connections.discard(self)  # the memory goes back now, not at connection_lost
        if self._transport is not None:
            self._transport.close()


async def _ready(parts: ResponseParts) -> ResponseParts:
    return parts


def _pread_region(region: Any) -> bytes:
    data = os.pread(region.file.fileno(), region.size, region.position)
    if len(data) < region.size:
        # The segment shrank under us (truncation or deletion): the frame size already sent
        # cannot be honoured, so the connection must close; the client retries the fetch.
        raise CloseConnection("file region shrank while being sent")
    return data
