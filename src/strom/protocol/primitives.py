"""Kafka wire primitives: a bounds-checked :class:`Reader` and ``write_*`` helpers (sans-io).

All integers are big-endian two's complement. The types, as Kafka's protocol guide defines them:

=====================  =========================================================================
int8/16/32/64          1/2/4/8 bytes, signed. ``uint16``/``uint32``: unsigned.
unsigned varint        7 bits per byte, least significant group first, high bit = "more";
                       at most 5 bytes for 32-bit values (``uvarlong``: 10 bytes).
varint / varlong       zigzag-encoded signed value in an unsigned varint / varlong.
string                 int16 length N ≥ 0, then N bytes of UTF-8.
nullable string        as string; length -1 means null.
compact string         unsigned varint N+1 (0 = null for the nullable form), then N bytes.
bytes / compact bytes  as the strings, with an int32 length (compact: uvarint N+1).
uuid                   16 raw bytes (Kafka's all-zero uuid means "none").
array                  int32 count N (-1 = null), then N elements.
compact array          unsigned varint N+1 (0 = null), then N elements.
tagged fields          uvarint count, then per field: uvarint tag, uvarint size, size bytes.
=====================  =========================================================================

:class:`Reader` walks a memoryview and raises :class:`InvalidRequestError` for anything
malformed (truncation, negative lengths where none is allowed, overlong varints, bad UTF-8) —
never ``IndexError``, ``struct.error`` or ``UnicodeDecodeError``. Byte fields come back as
memoryview slices of the input, not copies. Writers return ``bytes`` and raise ``ValueError``
for values that cannot be encoded (those are programming errors, not bad input).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from strom.common.errors import InvalidRequestError, KafkaError

T = TypeVar("T")

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")

_unpack_i8 = INT8.unpack_from
_unpack_i16 = INT16.unpack_from
_unpack_i32 = INT32.unpack_from
_unpack_i64 = INT64.unpack_from
_unpack_u16 = UINT16.unpack_from
_unpack_u32 = UINT32.unpack_from

#: The 16-byte all-zero uuid Kafka uses for "no topic id".
ZERO_UUID = bytes(16)
#: An empty tagged-field section: a zero count.
EMPTY_TAGGED_FIELDS = b"\x00"

# Single-byte varints, precomputed: nearly every varint on the data path is below 128.
_SMALL_UVARINTS: tuple[bytes, ...] = tuple(bytes((i,)) for i in range(128))


def _truncated(what: str, position: int) -> KafkaError:
    return InvalidRequestError(f"truncated {what} at byte {position}")


def read_uvarint(buf: memoryview, position: int) -> tuple[int, int]:
    """An unsigned varint (at most 5 bytes) at ``position``: ``(value, next position)``.

    The function form of :meth:`Reader.uvarint`, for hand-written loops that keep the
    position in a local variable.
    """
    try:
        byte = buf[position]
        if byte < 0x80:
            return byte, position + 1
        result = byte & 0x7F
        start = position
        shift = 7
        while True:
            position += 1
            byte = buf[position]
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result, position + 1
            shift += 7
            if shift > 28:
                raise InvalidRequestError(f"unsigned varint longer than allowed at byte {start}")
    except IndexError:
        raise _truncated("unsigned varint", position) from None


class Reader:
    """A cursor over a memoryview of Kafka wire data.

    ``buf`` is the (byte-format) memoryview being read and ``pos`` the next byte; both are
    public so hot decoders may ``unpack_from(reader.buf, reader.pos)`` a fixed run of fields
    and advance ``pos`` themselves. Owned by one decode call; not thread-safe.
    """

    __slots__ = ("buf", "pos", "size")

    def __init__(self, data: bytes | bytearray | memoryview, position: int = 0) -> None:
        view = data if isinstance(data, memoryview) else memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        self.buf: memoryview = view
        self.pos: int = position
        self.size: int = len(view)

    @property
    def remaining(self) -> int:
        """Bytes left after the cursor."""
        return self.size - self.pos

    def at_end(self) -> bool:
        return self.pos >= self.size

    def _need(self, count: int, what: str) -> int:
        """Advance past ``count`` bytes; return the old position."""
        position = self.pos
        end = position + count
        if end > self.size:
            raise _truncated(what, position)
        self.pos = end
        return position

    # -- fixed-width integers --------------------------------------------------------------

    def int8(self) -> int:
        position = self.pos
        try:
            (value,) = _unpack_i8(self.buf, position)
        except struct.error:
            raise _truncated("int8", position) from None
        self.pos = position + 1
        return int(value)

    def boolean(self) -> bool:
        return self.int8() != 0

    def int16(self) -> int:
        position = self.pos
        try:
            (value,) = _unpack_i16(self.buf, position)
        except struct.error:
            raise _truncated("int16", position) from None
        self.pos = position + 2
        return int(value)

    def uint16(self) -> int:
        position = self.pos
        try:
            (value,) = _unpack_u16(self.buf, position)
        except struct.error:
            raise _truncated("uint16", position) from None
        self.pos = position + 2
        return int(value)

    def int32(self) -> int:
        position = self.pos
        try:
            (value,) = _unpack_i32(self.buf, position)
        except struct.error:
            raise _truncated("int32", position) from None
        self.pos = position + 4
        return int(value)

    def uint32(self) -> int:
        position = self.pos
        try:
            (value,) = _unpack_u32(self.buf, position)
        except struct.error:
            raise _truncated("uint32", position) from None
        self.pos = position + 4
        return int(value)

    def int64(self) -> int:
        position = self.pos
        try:
            (value,) = _unpack_i64(self.buf, position)
        except struct.error:
            raise _truncated("int64", position) from None
        self.pos = position + 8
        return int(value)

    def unpack(self, layout: struct.Struct) -> tuple[int, ...]:
        """Read a fixed run of fields with a prebuilt ``struct.Struct`` (one call, fast)."""
        position = self.pos
        try:
            values = layout.unpack_from(self.buf, position)
        except struct.error:
            raise _truncated(f"{layout.format!r}", position) from None
        self.pos = position + layout.size
        return values

    # -- varints -----------------------------------------------------------------------------

    def _varint(self, max_shift: int, what: str) -> int:
        buf = self.buf
        position = self.pos
        size = self.size
        if position >= size:
            raise _truncated(what, position)
        byte = buf[position]
        position += 1
        if byte < 0x80:
            self.pos = position
            return byte
        result = byte & 0x7F
        shift = 7
        while True:
            if position >= size:
                raise _truncated(what, self.pos)
            byte = buf[position]
            position += 1
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                self.pos = position
                return result
            shift += 7
            if shift > max_shift:
                raise InvalidRequestError(f"{what} longer than allowed at byte {self.pos}")

    def uvarint(self) -> int:
        """Unsigned varint, at most 5 bytes."""
        return self._varint(28, "unsigned varint")

    def uvarlong(self) -> int:
        """Unsigned varlong, at most 10 bytes."""
        return self._varint(63, "unsigned varlong")

    def varint(self) -> int:
        """Zigzag-encoded signed 32-bit varint."""
        value = self._varint(28, "varint")
        return (value >> 1) ^ -(value & 1)

    def varlong(self) -> int:
        """Zigzag-encoded signed 64-bit varlong."""
        value = self._varint(63, "varlong")
        return (value >> 1) ^ -(value & 1)

    # -- strings -----------------------------------------------------------------------------

    def _text(self, length: int, what: str) -> str:
        position = self._need(length, what)
        try:
            return str(self.buf[position : position + length], "utf-8")
        except UnicodeDecodeError:
            raise InvalidRequestError(f"{what} at byte {position} is not UTF-8") from None

    def string(self) -> str:
        """int16-length string; null (or any negative length) is invalid."""
        length = self.int16()
        if length < 0:
            raise InvalidRequestError(f"non-nullable string is null at byte {self.pos - 2}")
        return self._text(length, "string")

    def nullable_string(self) -> str | None:
        """int16-length string; -1 is null, other negative lengths are invalid."""
        length = self.int16()
        if length < 0:
            if length == -1:
                return None
            raise InvalidRequestError(f"negative string length {length} at byte {self.pos - 2}")
        return self._text(length, "string")

    def compact_string(self) -> str:
        """uvarint(N+1)-length string; null (0) is invalid."""
        length = self.uvarint() - 1
        if length < 0:
            raise InvalidRequestError(f"non-nullable compact string is null at byte {self.pos}")
        return self._text(length, "compact string")

    def compact_nullable_string(self) -> str | None:
        """uvarint(N+1)-length string; 0 is null."""
        length = self.uvarint() - 1
        if length < 0:
            return None
        return self._text(length, "compact string")

    # -- bytes (memoryview slices, never copies) ---------------------------------------------

    def raw(self, length: int) -> memoryview:
        """The next ``length`` bytes as a slice of the input."""
        if length < 0:
            raise InvalidRequestError(f"negative length {length} at byte {self.pos}")
        position = self._need(length, "bytes")
        return self.buf[position : position + length]

    def bytes_(self) -> memoryview:
        """int32-length bytes; null is invalid."""
        length = self.int32()
        if length < 0:
            raise InvalidRequestError(f"non-nullable bytes are null at byte {self.pos - 4}")
        return self.raw(length)

    def nullable_bytes(self) -> memoryview | None:
        """int32-length bytes; -1 is null."""
        length = self.int32()
        if length < 0:
            if length == -1:
                return None
            raise InvalidRequestError(f"negative bytes length {length} at byte {self.pos - 4}")
        return self.raw(length)

    def compact_bytes(self) -> memoryview:
        """uvarint(N+1)-length bytes; null is invalid."""
        length = self.uvarint() - 1
        if length < 0:
            raise InvalidRequestError(f"non-nullable compact bytes are null at byte {self.pos}")
        return self.raw(length)

    def compact_nullable_bytes(self) -> memoryview | None:
        """uvarint(N+1)-length bytes; 0 is null."""
        length = self.uvarint() - 1
        if length < 0:
            return None
        return self.raw(length)

    def uuid(self) -> bytes:
        """16 raw bytes (copied: a uuid is a small value, used as a dict key)."""
        position = self._need(16, "uuid")
        return self.buf[position : position + 16].tobytes()

    # -- arrays ------------------------------------------------------------------------------

    def _count(self, count: int, at: int) -> int:
        # Every element of every Kafka array takes at least one byte, so a count larger than
        # what is left is malformed; checking it here keeps a hostile count from driving a
        # long loop before the truncation is noticed.
        if count < -1:
            raise InvalidRequestError(f"negative array length {count} at byte {at}")
        if count > self.size - self.pos:
            raise InvalidRequestError(f"array length {count} at byte {at} exceeds the data")
        return count

    def array_length(self) -> int:
        """int32 element count; -1 means null (callers decide whether null is allowed)."""
        at = self.pos
        return self._count(self.int32(), at)

    def compact_array_length(self) -> int:
        """uvarint(N+1) element count; returns -1 for null."""
        at = self.pos
        return self._count(self.uvarint() - 1, at)

    def array(self, read_item: Callable[[Reader], T]) -> list[T]:
        """Non-nullable int32-counted array."""
        count = self.array_length()
        if count < 0:
            raise InvalidRequestError(f"non-nullable array is null at byte {self.pos - 4}")
        return [read_item(self) for _ in range(count)]

    def nullable_array(self, read_item: Callable[[Reader], T]) -> list[T] | None:
        count = self.array_length()
        if count < 0:
            return None
        return [read_item(self) for _ in range(count)]

    def compact_array(self, read_item: Callable[[Reader], T]) -> list[T]:
        """Non-nullable uvarint(N+1)-counted array."""
        count = self.compact_array_length()
        if count < 0:
            raise InvalidRequestError(f"non-nullable compact array is null at byte {self.pos}")
        return [read_item(self) for _ in range(count)]

    def compact_nullable_array(self, read_item: Callable[[Reader], T]) -> list[T] | None:
        count = self.compact_array_length()
        if count < 0:
            return None
        return [read_item(self) for _ in range(count)]

    # -- tagged fields -----------------------------------------------------------------------

    def skip_tagged_fields(self) -> None:
        """Skip a tagged-field section, whatever tags it holds (unknown tags are ignored)."""
        buf = self.buf
        position = self.pos
        if position < self.size and buf[position] == 0:  # the usual, empty section
            self.pos = position + 1
            return
        count = self.uvarint()
        for _ in range(count):
            self.uvarint()
            length = self.uvarint()
            self._need(length, "tagged field")

    def tagged_fields(self) -> list[tuple[int, memoryview]]:
        """A tagged-field section as ``(tag, data)`` pairs in wire order; data is a slice."""
        buf = self.buf
        position = self.pos
        if position < self.size and buf[position] == 0:
            self.pos = position + 1
            return []
        count = self.uvarint()
        fields: list[tuple[int, memoryview]] = []
        for _ in range(count):
            tag = self.uvarint()
            length = self.uvarint()
            start = self._need(length, "tagged field")
            fields.append((tag, buf[start : start + length]))
        return fields


# -- writers ---------------------------------------------------------------------------------


def write_int8(value: int) -> bytes:
    return INT8.pack(value)


def write_boolean(value: bool) -> bytes:
    return b"\x01" if value else b"\x00"


def write_int16(value: int) -> bytes:
    return INT16.pack(value)


def write_uint16(value: int) -> bytes:
    return UINT16.pack(value)


def write_int32(value: int) -> bytes:
    return INT32.pack(value)


def write_uint32(value: int) -> bytes:
    return UINT32.pack(value)


def write_int64(value: int) -> bytes:
    return INT64.pack(value)


def write_uvarint(value: int) -> bytes:
    """Unsigned varint (any non-negative value up to 2**64 - 1)."""
    if 0 <= value < 0x80:
        return _SMALL_UVARINTS[value]
    # Record-set lengths make 2- and 3-byte varints common: build those without a loop.
    if 0x80 <= value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    if 0x4000 <= value < 0x200000:
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    if value < 0 or value >= 1 << 64:
        raise ValueError(f"unsigned varint out of range: {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def write_varint(value: int) -> bytes:
    """Zigzag signed 32-bit varint."""
    if not -(1 << 31) <= value < 1 << 31:
        raise ValueError(f"varint out of range: {value}")
    return write_uvarint((value << 1) ^ (value >> 31))


def write_varlong(value: int) -> bytes:
    """Zigzag signed 64-bit varlong."""
    if not -(1 << 63) <= value < 1 << 63:
        raise ValueError(f"varlong out of range: {value}")
    return write_uvarint((value << 1) ^ (value >> 63))


def write_string(value: str) -> bytes:
    """int16-length UTF-8 string."""
    data = value.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
    return INT16.pack(len(data)) + data


def write_nullable_string(value: str | None) -> bytes:
    return b"\xff\xff" if value is None else write_string(value)


def write_compact_string(value: str) -> bytes:
    """uvarint(N+1)-length UTF-8 string."""
    data = value.encode("utf-8")
    return write_uvarint(len(data) + 1) + data


def write_compact_nullable_string(value: str | None) -> bytes:
    return b"\x00" if value is None else write_compact_string(value)


def write_bytes(value: bytes | bytearray | memoryview) -> bytes:
    """int32-length bytes."""
    return INT32.pack(len(value)) + bytes(value)


def write_nullable_bytes(value: bytes | bytearray | memoryview | None) -> bytes:
    return b"\xff\xff\xff\xff" if value is None else write_bytes(value)


def write_compact_bytes(value: bytes | bytearray | memoryview) -> bytes:
    """uvarint(N+1)-length bytes."""
    return write_uvarint(len(value) + 1) + bytes(value)


def write_compact_nullable_bytes(value: bytes | bytearray | memoryview | None) -> bytes:
    return b"\x00" if value is None else write_compact_bytes(value)


def write_uuid(value: bytes | None) -> bytes:
    """16 raw bytes; None is written as the all-zero uuid."""
    if value is None:
        return ZERO_UUID
    if len(value) != 16:
        raise ValueError(f"a uuid is 16 bytes, got {len(value)}")
    return bytes(value)


def write_array_length(count: int | None) -> bytes:
    """int32 count; None writes -1 (null)."""
    return b"\xff\xff\xff\xff" if count is None else INT32.pack(count)


def write_compact_array_length(count: int | None) -> bytes:
    """uvarint(N+1) count; None writes 0 (null)."""
    return b"\x00" if count is None else write_uvarint(count + 1)


def write_array(items: Sequence[T] | None, write_item: Callable[[T], bytes]) -> bytes:
    """int32-counted array (None → null)."""
    if items is None:
        return b"\xff\xff\xff\xff"
    return INT32.pack(len(items)) + b"".join(write_item(item) for item in items)


def write_compact_array(items: Sequence[T] | None, write_item: Callable[[T], bytes]) -> bytes:
    """uvarint(N+1)-counted array (None → null)."""
    if items is None:
        return b"\x00"
    return write_uvarint(len(items) + 1) + b"".join(write_item(item) for item in items)


def write_tagged_fields(
    fields: Mapping[int, bytes] | Iterable[tuple[int, bytes]] | None = None,
) -> bytes:
    """A tagged-field section holding exactly the given ``tag → encoded value`` entries.

    Tags are written in ascending order, as the protocol requires. Callers pass only fields
    whose values differ from their defaults; nothing else is written (an empty section is the
    single byte 0).
    """
    if not fields:
        return EMPTY_TAGGED_FIELDS
    entries = sorted(fields.items() if isinstance(fields, Mapping) else fields)
    parts = [write_uvarint(len(entries))]
    for tag, data in entries:
        parts.append(write_uvarint(tag))
        parts.append(write_uvarint(len(data)))
        parts.append(data)
    return b"".join(parts)
