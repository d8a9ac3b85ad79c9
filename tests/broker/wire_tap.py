"""A TCP proxy that pairs each request a real client sends with the broker's response.

Used to see what a client puts on the wire (and what the broker answers) without touching
either: start a broker advertised as the proxy's address, point the client at the proxy.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Exchange:
    """One request and its response; ``request`` is the frame after the size prefix (header
    included), ``response`` the response frame (correlation id first)."""

    api_key: int
    api_version: int
    request: bytes
    response: bytes

    @property
    def request_size(self) -> int:
        return len(self.request)

    @property
    def response_size(self) -> int:
        return len(self.response)


def _frames(sock: socket.socket, sink: socket.socket) -> Iterator[bytes]:
    """Forward everything from ``sock`` to ``sink``, yielding each size-prefixed frame before
    the bytes that complete it are forwarded (so a request is recorded before its answer)."""
    buffer = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            buffer += chunk
            while len(buffer) >= 4:
                size = struct.unpack_from(">i", buffer)[0]
                if len(buffer) < 4 + size:
                    break
                yield buffer[4:4 + size]
                buffer = buffer[4 + size:]
            sink.sendall(chunk)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


class WireTap:
    """Listens on a local port and forwards every connection to ``upstream``; completed
    exchanges are appended to ``exchanges`` (in response order). Two threads per connection."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.upstream: tuple[str, int] | None = None
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()

    def of(self, api_key: int) -> list[Exchange]:
        with self._lock:
            return [e for e in self.exchanges if e.api_key == api_key]

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            if self.upstream is None:
                downstream.close()
                continue
            try:
                upstream = socket.create_connection(self.upstream)
            except OSError:  # the upstream broker is down: the client sees a closed socket
                downstream.close()
                continue
            pending: dict[int, bytes] = {}
            threading.Thread(target=self._requests, args=(downstream, upstream, pending),
                             daemon=True).start()
            threading.Thread(target=self._responses, args=(upstream, downstream, pending),
                             daemon=True).start()

    def _requests(self, source: socket.socket, sink: socket.socket,
                  pending: dict[int, bytes]) -> None:
        for frame in _frames(source, sink):
            correlation = struct.unpack_from(">i", frame, 4)[0]
            with self._lock:
                pending[correlation] = frame

    def _responses(self, source: socket.socket, sink: socket.socket,
                   pending: dict[int, bytes]) -> None:
        for frame in _frames(source, sink):
            correlation = struct.unpack_from(">i", frame)[0]
            with self._lock:
                request = pending.pop(correlation, None)
                if request is not None:
                    api_key, version = struct.unpack_from(">hh", request)
                    self.exchanges.append(Exchange(api_key, version, request, frame))
