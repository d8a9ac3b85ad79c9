"""The asyncio network layer: one :class:`KafkaConnection` protocol object per client socket.

Requests on a connection are processed one at a time and answered in order, as Kafka does
(a parked Fetch or a durable Produce holds the connection's later requests back; clients
pipeline across connections and partitions). Backpressure: reading pauses while too many
frames wait or while the transport's write buffer is above its high-water mark.

Responses are lists of parts. Small file regions are read with ``os.pread`` and written with
the rest; large ones go out with ``loop.sendfile`` (``os.sendfile`` on plain TCP), so record
bytes are never copied through Python objects.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections import deque
from collections.abc import Awaitable
from typing import Any

from strom.broker.dispatch import (
    CloseConnection,
    ConnectionContext,
    Dispatcher,
    ResponseParts,
)
from strom.protocol.frame import FrameDecoder, FrameTooLargeError

log = logging.getLogger("strom.broker.network")

MAX_QUEUED_FRAMES = 64
SENDFILE_THRESHOLD = 256 * 1024


class KafkaConnection(asyncio.Protocol):
    """Owns one client socket; created by the server's listener, lives until the socket closes."""

    def __init__(self, dispatcher: Dispatcher, max_request_size: int, registry: set[Any]) -> None:
        self._dispatcher = dispatcher
        self._decoder = FrameDecoder(max_request_size)
        self._queue: deque[memoryview] = deque()
        self._busy = False
        self._write_paused = False
        self._read_paused = False
        self._closed = False
        self._registry = registry
        self._transport: asyncio.Transport | None = None
        self._task: asyncio.Task[None] | None = None
        self.context = ConnectionContext(peer="?")

    # -- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        self.context.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._registry.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._queue.clear()
        self._registry.discard(self)
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except FrameTooLargeError as exc:
            log.warning("closing %s: %s", self.context.peer, exc)
            self.close()
            return
        self._queue.extend(frames)
        self._process()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._process()

    # -- processing -------------------------------------------------------------------------
    def _process(self) -> None:
        while self._queue and not self._busy and not self._write_paused and not self._closed:
            frame = self._queue.popleft()
            try:
                result = self._dispatcher.dispatch(self.context, frame)
                if result is None:
                    continue
                if isinstance(result, list):
                    if not self._send(result):
                        self._start(self._send_async(result))
                else:
                    self._start(self._await_result(result))
            except CloseConnection as exc:
                log.warning("closing %s: %s", self.context.peer, exc)
                self.close()
                return
            except Exception:
                log.exception("unexpected error serving %s; closing it", self.context.peer)
                self.close()
                return
        self._apply_read_backpressure()

    def _apply_read_backpressure(self) -> None:
        transport = self._transport
        if transport is None or self._closed:
            return
        should_pause = len(self._queue) >= MAX_QUEUED_FRAMES
        if should_pause and not self._read_paused:
            transport.pause_reading()
            self._read_paused = True
        elif not should_pause and self._read_paused:
            transport.resume_reading()
            self._read_paused = False

    def _start(self, coro: Awaitable[None]) -> None:
        self._busy = True
        self._task = asyncio.ensure_future(coro)
        self._task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._busy = False
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            if isinstance(exc, CloseConnection):
                log.warning("closing %s: %s", self.context.peer, exc)
            elif not isinstance(exc, ConnectionError):
                log.error("error serving %s; closing it", self.context.peer, exc_info=exc)
            self.close()
            return
        self._process()

    async def _await_result(self, pending: Awaitable[ResponseParts | None]) -> None:
        parts = await pending
        if parts is not None and not self._closed and not self._send(parts):
            await self._send_async(parts)

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
            await loop.sendfile(transport, part.file, part.position, part.size)  # type: ignore[attr-defined]
        if pending:
            transport.write(b"".join(pending))

    def close(self) -> None:
        self._closed = True
        self._queue.clear()
        if self._transport is not None:
            self._transport.close()


def _pread_region(region: Any) -> bytes:
    data = os.pread(region.file.fileno(), region.size, region.position)
    if len(data) < region.size:
        # The segment shrank under us (truncation or deletion): the frame size already sent
        # cannot be honoured, so the connection must close; the client retries the fetch.
        raise CloseConnection("file region shrank while being sent")
    return data
