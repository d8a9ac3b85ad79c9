"""One record of a v2 record batch, and the varint / zigzag helpers its encoding uses.

Wire format of a record inside a batch (Kafka's ``DefaultRecord``)::

    length             varint    bytes that follow this field
    attributes         int8      unused, always 0
    timestamp_delta    varlong   record timestamp - batch base_timestamp
    offset_delta       varint    record offset - batch base_offset
    key_length         varint    -1 = null key
    key                bytes
    value_length       varint    -1 = null value
    value              bytes
    headers_count      varint
    headers            [header_key_length varint (never null), header_key UTF-8,
                        header_value_length varint (-1 = null), header_value bytes]

``varint`` / ``varlong`` are zigzag-encoded signed integers (``(n << 1) ^ (n >> 63)``) written as
unsigned LEB128: 7 bits per byte, least significant group first, high bit set on every byte
but the last. A varint takes at most 5 bytes, a varlong at most 10.

The decoders here raise :class:`CorruptMessageError` for truncated or overlong input and
never ``IndexError``. The batch reader inlines the one-byte case of these for speed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from strom.common.errors import CorruptMessageError

Header = tuple[str, bytes | None]

#: Zigzag varints 0..63 and -64..-1 fit in one byte; precomputed because nearly every
#: length, delta and count on the data path is that small.
_ONE_BYTE: tuple[bytes, ...] = tuple(bytes((i,)) for i in range(128))

VARINT_MAX_BYTES = 5
VARLONG_MAX_BYTES = 10


@dataclass(slots=True)
class Record:
    """A decoded record: absolute offset and timestamp (ms) already resolved from its batch.

    For control batches ``key`` and ``value`` hold the control record's key and value
    (see :mod:`strom.protocol.records.control`).
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)


def zigzag_encode(value: int) -> int:
    """Map a signed 64-bit integer to an unsigned one: 0, -1, 1, -2 … → 0, 1, 2, 3 …"""
    return ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF


def zigzag_decode(value: int) -> int:
    """Inverse of :func:`zigzag_encode`."""
    return (value >> 1) ^ -(value & 1)


def encode_uvarint(value: int) -> bytes:
    """Unsigned LEB128 encoding of a non-negative integer."""
    if value < 0x80:
        if value < 0:
            raise ValueError(f"unsigned varint cannot hold {value}")
        return _ONE_BYTE[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Zigzag varint (or varlong: same encoding, just up to 10 bytes) of a signed integer."""
    if -64 <= value < 64:
        return _ONE_BYTE[(value << 1) ^ (value >> 63)]
    return encode_uvarint(zigzag_encode(value))


def size_of_varint(value: int) -> int:
    """Bytes :func:`encode_varint` writes for ``value``."""
    unsigned = zigzag_encode(value)
    size = 1
    while unsigned >= 0x80:
        unsigned >>= 7
        size += 1
    return size


def decode_uvarint(
    buf: bytes | bytearray | memoryview, pos: int = 0, max_bytes: int = VARLONG_MAX_BYTES
) -> tuple[int, int]:
    """Decode an unsigned varint at ``pos``; returns ``(value, position after it)``."""
    result = 0
    shift = 0
    end = min(len(buf), pos + max_bytes)
    while pos < end:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
    if pos >= len(buf):
        raise CorruptMessageError("truncated varint")
    raise CorruptMessageError(f"varint longer than {max_bytes} bytes")


def decode_varint(
    buf: bytes | bytearray | memoryview, pos: int = 0, max_bytes: int = VARINT_MAX_BYTES
) -> tuple[int, int]:
    """Decode a zigzag varint (pass ``max_bytes=10`` for a varlong) at ``pos``."""
    unsigned, pos = decode_uvarint(buf, pos, max_bytes)
    return (unsigned >> 1) ^ -(unsigned & 1), pos


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Decode a zigzag varlong (up to 10 bytes) at ``pos``."""
    return decode_varint(buf, pos, VARLONG_MAX_BYTES)


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | bytearray | memoryview | None,
    value: bytes | bytearray | memoryview | None,
    headers: tuple[Header, ...] | list[Header] = (),
) -> bytes:
    """One record in its wire form, length prefix included."""
    parts: list[bytes | bytearray | memoryview] = [
        b"\x00",
        encode_varint(timestamp_delta),
        encode_varint(offset_delta),
    ]
    if key is None:
        parts.append(b"\x01")
    else:
        parts.append(encode_varint(len(key)))
        parts.append(key)
    if value is None:
        parts.append(b"\x01")
    else:
        parts.append(encode_varint(len(value)))
        parts.append(value)
    parts.append(encode_varint(len(headers)))
    for header_key, header_value in headers:
        encoded_key = header_key.encode("utf-8")
        parts.append(encode_varint(len(encoded_key)))
        parts.append(encoded_key)
        if header_value is None:
            parts.append(b"\x01")
        else:
            parts.append(encode_varint(len(header_value)))
            parts.append(header_value)
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def record_size(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | bytearray | memoryview | None,
    value: bytes | bytearray | memoryview | None,
    headers: tuple[Header, ...] | list[Header] = (),
) -> int:
    """Exact encoded size of a record (length prefix included) without encoding it."""
    size = 1 + size_of_varint(timestamp_delta) + size_of_varint(offset_delta)
    size += _nullable_size(key) + _nullable_size(value) + size_of_varint(len(headers))
    for header_key, header_value in headers:
        key_len = len(header_key.encode("utf-8"))
        size += size_of_varint(key_len) + key_len + _nullable_size(header_value)
    return size + size_of_varint(size)


def _nullable_size(data: bytes | bytearray | memoryview | None) -> int:
    if data is None:
        return 1
    return size_of_varint(len(data)) + len(data)
