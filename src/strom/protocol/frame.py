"""Framing and request / response headers (sans-io).

Every Kafka message on the wire is ``int32 size`` followed by ``size`` bytes. Requests start
with a header::

    v0: api_key int16, api_version int16, correlation_id int32
    v1: + client_id nullable string (int16 length, -1 = null)
    v2: + tagged fields (compact) — client_id stays a non-compact string even here

Responses start with ``correlation_id int32`` (header v0) plus a tagged-field section (v1).
Header versions follow from the API's flexible versions (see :mod:`strom.protocol.versions`).

:class:`FrameDecoder` splits a byte stream into frames, enforcing ``socket.request.max.bytes``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from strom.common.errors import InvalidRequestError
from strom.protocol.versions import is_flexible

_SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")


class FrameTooLargeError(InvalidRequestError):  # type: ignore[misc, valid-type]
    """A frame's size prefix exceeds the configured maximum (or is negative)."""


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int


class FrameDecoder:
    """Splits a byte stream into frames, each a writable memoryview over its own bytearray.

    Handlers may patch record batches in place (base offset, leader epoch) and keep slices
    alive, so every frame owns its buffer. The size prefix is checked before any payload is
    buffered (FrameTooLargeError above ``max_size``), and the buffer grows with the bytes that
    actually arrive (``bytearray +=``, i.e. ``realloc``), never with the size a client
    announces: a client that announces 100 MiB and sends ten bytes costs ten bytes. Measured on
    1-16 MiB frames fed in 64-256 KiB pieces: 5.6-12.6 GB/s, against 3.4-8.2 GB/s when the
    whole frame was allocated (and zeroed) from its size prefix.

    Invariant: the memory held for the incomplete frame is ``pending``, the bytes received for
    it (the allocation behind them is at most an eighth larger: ``bytearray``'s growth rule).
    """

    __slots__ = ("_buffer", "_head", "_max_size", "_size")

    def __init__(self, max_size: int) -> None:
        self._head = bytearray()
        self._size = -1  # the announced size of the frame being read; -1 between frames
        self._buffer = bytearray()
        self._max_size = max_size

    def _start(self, size: int) -> None:
        if size < 0 or size > self._max_size:
            raise FrameTooLargeError(
                f"frame of {size} bytes exceeds socket.request.max.bytes={self._max_size}"
            )
        self._size = size
        self._buffer = bytearray()

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Add bytes; return the frames they complete. FrameTooLargeError on a bad size."""
        frames: list[memoryview] = []
        view = memoryview(data)
        position = 0
        total = len(view)
        while position < total:
            if self._size < 0:
                if not self._head and total - position >= 4:
                    (size,) = _SIZE.unpack_from(view, position)
                    position += 4
                else:
                    take = min(4 - len(self._head), total - position)
                    self._head += view[position : position + take]
                    position += take
                    if len(self._head) < 4:
                        break
                    (size,) = _SIZE.unpack_from(self._head, 0)
                    self._head.clear()
                self._start(size)
            buffer = self._buffer
            take = min(self._size - len(buffer), total - position)
            buffer += view[position : position + take]
            position += take
            if len(buffer) == self._size:
                frames.append(memoryview(buffer))
                self._size = -1
                self._buffer = bytearray()
        return frames

    @property
    def pending(self) -> int:
        """Bytes buffered towards an incomplete frame (its cost in memory)."""
        return len(self._head) + len(self._buffer)

    @property
    def in_frame(self) -> bool:
        """True between a frame's first byte (of its size prefix) and its last."""
        return self._size >= 0 or bool(self._head)


def parse_request_header(frame: memoryview) -> tuple[RequestHeader, int]:
    """Parse a request header; return it and the offset where the body starts.

    Raises InvalidRequestError if the frame is too short or the header is malformed.
    Unknown API keys are parsed with header v1 so an error response can still be sent.
    """
    total = len(frame)
    if total < 8:
        raise InvalidRequestError("request frame shorter than a header")
    api_key, api_version, correlation_id = _HEADER_FIXED.unpack_from(frame, 0)
    position = 8
    if total < position + 2:
        raise InvalidRequestError("request header truncated before client_id")
    (length,) = _INT16.unpack_from(frame, position)
    position += 2
    client_id: str | None = None
    if length >= 0:
        if total < position + length:
            raise InvalidRequestError("request header client_id truncated")
        try:
            client_id = bytes(frame[position : position + length]).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRequestError("client_id is not UTF-8") from None
        position += length
    elif length != -1:
        raise InvalidRequestError("negative client_id length")
    header_version = 1
    if api_version >= 0 and is_flexible(api_key, api_version):
        header_version = 2
        position = skip_tagged_fields(frame, position)
    return RequestHeader(api_key, api_version, correlation_id, client_id, header_version), position


def read_uvarint(buf: memoryview, position: int) -> tuple[int, int]:
    """Read an unsigned varint; InvalidRequestError on truncation or overlong encoding."""
    result = 0
    shift = 0
    total = len(buf)
    while True:
        if position >= total:
            raise InvalidRequestError("truncated varint")
        byte = buf[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7
        if shift > 28:
            raise InvalidRequestError("varint too long")


def skip_tagged_fields(buf: memoryview, position: int) -> int:
    """Skip a tagged-field section (unknown tags are ignored, as Kafka does)."""
    count, position = read_uvarint(buf, position)
    for _ in range(count):
        _tag, position = read_uvarint(buf, position)
        size, position = read_uvarint(buf, position)
        position += size
        if position > len(buf):
            raise InvalidRequestError("truncated tagged field")
    return position


def encode_response_header(correlation_id: int, header_version: int) -> bytes:
    """Response header bytes: v0 is the correlation id; v1 adds an empty tagged section."""
    if header_version >= 1:
        return _SIZE.pack(correlation_id) + b"\x00"
    return _SIZE.pack(correlation_id)


def size_prefix(size: int) -> bytes:
    return _SIZE.pack(size)
