"""Kafka's primitive encodings for the records of internal topics (sans-io).

Shared by the ``__consumer_offsets`` and ``__transaction_state`` record formats. Classic
(non-flexible) forms: strings int16-length UTF-8 (-1 = null), bytes int32-length, arrays
int32-count. Flexible forms (a record version that says so): unsigned-varint "compact" lengths
+ 1 (0 = null), and a tagged-field section (count, then tag / size / bytes) after each struct.
"""

from __future__ import annotations

import struct

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """An internal-topic key or value that cannot be decoded."""


def java_string_hashcode(text: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units, 32-bit wrap-around), signed."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h


def partition_for(key: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(key.hashCode) % partitions``: the internal-topic partition that
    owns a group id or a transactional id."""
    return (java_string_hashcode(key) & 0x7FFFFFFF) % partitions


def encode_string(text: str | None) -> bytes:
    if text is None:
        return _I16.pack(-1)
    data = text.encode("utf-8")
    return _I16.pack(len(data)) + data


def encode_bytes(data: bytes) -> bytes:
    return _I32.pack(len(data)) + data


class Reader:
    """Reads Kafka primitive types; compact (flexible) forms when ``flexible``."""

    __slots__ = ("data", "flexible", "pos")

    def __init__(self, data: bytes, pos: int = 0, flexible: bool = False) -> None:
        self.data = data
        self.pos = pos
        self.flexible = flexible

    def _take(self, size: int) -> bytes:
        end = self.pos + size
        if size < 0 or end > len(self.data):
            raise RecordFormatError("truncated record")
        chunk = self.data[self.pos:end]
        self.pos = end
        return chunk

    def int16(self) -> int:
        value: int = _I16.unpack(self._take(2))[0]
        return value

    def int32(self) -> int:
        value: int = _I32.unpack(self._take(4))[0]
        return value

    def int64(self) -> int:
        value: int = _I64.unpack(self._take(8))[0]
        return value

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise RecordFormatError("varint too long")

    def _length(self, wide: bool) -> int:
        if self.flexible:
            return self.uvarint() - 1
        return self.int32() if wide else self.int16()

    def nullable_string(self) -> str | None:
        size = self._length(False)
        if size < 0:
            return None
        try:
            return self._take(size).decode("utf-8")
        except UnicodeDecodeError:
            raise RecordFormatError("string is not UTF-8") from None

    def string(self) -> str:
        text = self.nullable_string()
        if text is None:
            raise RecordFormatError("null where a string is required")
        return text

    def bytes_(self) -> bytes:
        size = self._length(True)
        return b"" if size < 0 else self._take(size)

    def array_length(self) -> int:
        return max(self._length(True), 0)

    def nullable_array_length(self) -> int:
        """The element count, or -1 for a null array."""
        return self._length(True)

    def take(self, size: int) -> bytes:
        return self._take(size)

    def tagged_fields(self) -> list[tuple[int, bytes]]:
        """The (tag, payload) pairs of a flexible struct's tagged-field section."""
        if not self.flexible:
            return []
        return [(self.uvarint(), self._take(self.uvarint())) for _ in range(self.uvarint())]

    def skip_tagged_fields(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()  # tag
                self._take(self.uvarint())


