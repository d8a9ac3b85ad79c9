"""Key and value deserializers of the consumer (the counterparts of Kafka's serializers).

A deserializer turns a record's key or value bytes into an object; ``None`` (a null key or
a tombstone) stays ``None`` for every deserializer. By name:

- ``"bytes"`` — the bytes unchanged (the default);
- ``"str"`` / ``"string"`` — UTF-8 text (Java's StringDeserializer);
- ``"int"`` / ``"integer"`` — a 4-byte big-endian signed integer (Java's IntegerDeserializer);
- ``"long"`` — an 8-byte big-endian signed integer (Java's LongDeserializer);
- ``"double"`` — an 8-byte IEEE 754 big-endian float (Java's DoubleDeserializer);
- ``"json"`` — a UTF-8 JSON document.

Any callable ``f(data: bytes) -> object`` is a custom deserializer. A deserializer that
raises fails the poll with :class:`DeserializationError` naming the record's position.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

from strom.client.records import ClientConfigError
from strom.common.errors import StromError

Deserializer = Callable[[bytes], Any]


class DeserializationError(StromError):
    """A record's key or value could not be deserialized."""


def _fixed(fmt: str, name: str) -> Deserializer:
    unpacker = struct.Struct(fmt)

    def parse(data: bytes) -> Any:
        if len(data) != unpacker.size:
            raise ValueError(f"a {name} is {unpacker.size} bytes, got {len(data)}")
        return unpacker.unpack(data)[0]

    return parse


def _utf8(data: bytes) -> str:
    return bytes(data).decode("utf-8")


def _json(data: bytes) -> Any:
    return json.loads(bytes(data).decode("utf-8"))


def _bytes(data: bytes) -> bytes:
    return data


NAMED: dict[str, Deserializer] = {
    "bytes": _bytes,
    "str": _utf8,
    "string": _utf8,
    "int": _fixed(">i", "int"),
    "integer": _fixed(">i", "int"),
    "long": _fixed(">q", "long"),
    "double": _fixed(">d", "double"),
    "json": _json,
}


def deserializer(spec: str | Deserializer | None) -> Deserializer | None:
    """The deserializer for a name or callable; None for the identity (bytes)."""
    if spec is None:
        return None
    if callable(spec):
        return spec
    fn = NAMED.get(spec.strip().lower())
    if fn is None:
        raise ClientConfigError(f"unknown deserializer {spec!r}: expected a callable or one of "
                                f"{', '.join(NAMED)}")
    return None if fn is _bytes else fn
