"""A minimal blocking Kafka wire client for broker tests: exact bytes in, exact bytes out."""

from __future__ import annotations

import socket
import struct
from typing import Any

from strom.protocol import api
from strom.protocol.versions import request_header_version, response_header_version


class RawClient:
    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def header(self, api_key: int, version: int, client_id: str = "raw") -> bytes:
        self.correlation += 1
        raw = struct.pack(">hhi", api_key, version, self.correlation)
        raw += struct.pack(">h", len(client_id)) + client_id.encode()
        if request_header_version(api_key, version) == 2:
            raw += b"\x00"
        return raw

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._read_exact(4))[0]
        return self._read_exact(size)

    def _read_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("connection closed by broker")
            out += chunk
        return bytes(out)

    def call_raw(self, api_key: int, version: int, body: bytes) -> bytes:
        """Send a request with a raw body; return the response body (header stripped)."""
        self.send_frame(self.header(api_key, version) + body)
        frame = self.read_frame()
        correlation = struct.unpack(">i", frame[:4])[0]
        assert correlation == self.correlation
        skip = 5 if response_header_version(api_key, version) == 1 else 4
        return frame[skip:]

    def call(self, api_key: int, version: int, fields: dict[str, Any]) -> Any:
        body = api.request(api_key, version, fields)
        return api.decode_response(api_key, version, self.call_raw(api_key, version, body))
