"""Key and value serializers of the producer, as Kafka's ``Serializer`` classes.

A serializer turns an application object into the bytes of a record's key or value. The
producer accepts, for ``key_serializer=`` / ``value_serializer=``:

- a name: ``"bytes"`` (the default: bytes-like in, bytes out), ``"str"`` (UTF-8),
  ``"int"`` (Kafka's IntegerSerializer: 4 bytes, big-endian, signed), ``"long"`` (8 bytes),
  ``"double"`` (8-byte IEEE 754, big-endian), ``"json"`` (UTF-8 JSON, compact), or the
  Java class name of the same serializer (``org.apache.kafka.common.serialization.
  StringSerializer`` …), so ``key.serializer=`` properties of Kafka tools carry over;
- an object with ``serialize(topic, data) -> bytes | None`` (Kafka's interface);
- any callable ``f(data) -> bytes | None`` (as kafka-python and aiokafka take).

Invariant, as Kafka's: ``None`` stays ``None`` (a null key or a tombstone value), whatever
the serializer; a serializer never sees it. A failing serializer raises
:class:`SerializationError` from ``send()`` — the record is not queued.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from strom.client.records import ClientConfigError
from strom.common.errors import StromError


class SerializationError(StromError):
    """A key or value could not be serialized (Kafka's SerializationException)."""


@runtime_checkable
class Serializer(Protocol):
    """Kafka's ``Serializer``: ``serialize(topic, data)`` → the bytes to send."""

    def serialize(self, topic: str, data: Any) -> bytes | None: ...


#: What ``key_serializer=`` / ``value_serializer=`` accept.
SerializerSpec = str | Serializer | Callable[[Any], "bytes | None"] | None


def _bytes(data: Any) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"expected bytes, got {type(data).__name__} (set a serializer)")


def _str(data: Any) -> bytes:
    if not isinstance(data, str):
        raise TypeError(f"expected str, got {type(data).__name__}")
    return data.encode("utf-8")


def _packer(fmt: str, kind: type) -> Callable[[Any], bytes]:
    packer = struct.Struct(fmt).pack

    def pack(data: Any) -> bytes:
        if not isinstance(data, kind) or isinstance(data, bool):
            raise TypeError(f"expected {kind.__name__}, got {type(data).__name__}")
        return packer(data)

    return pack


def _json(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


_JAVA = "org.apache.kafka.common.serialization."

#: Built-in serializers by name; Java class names map to the same functions.
BUILTIN: dict[str, Callable[[Any], bytes]] = {
    "bytes": _bytes,
    "str": _str,
    "int": _packer(">i", int),
    "long": _packer(">q", int),
    "double": _packer(">d", float),
    "json": _json,
}
_ALIASES = {
    "string": "str", "integer": "int",
    f"{_JAVA}ByteArraySerializer": "bytes", f"{_JAVA}BytesSerializer": "bytes",
    f"{_JAVA}StringSerializer": "str", f"{_JAVA}IntegerSerializer": "int",
    f"{_JAVA}LongSerializer": "long", f"{_JAVA}DoubleSerializer": "double",
}


def serializer_names() -> list[str]:
    """Every name :func:`resolve_serializer` takes."""
    return sorted([*BUILTIN, *_ALIASES])


def resolve_serializer(spec: SerializerSpec) -> Callable[[str, Any], bytes | None]:
    """``spec`` as one function ``(topic, data) -> bytes | None`` that keeps None as None and
    raises SerializationError for anything that cannot be serialized."""
    if spec is None:
        spec = "bytes"
    if isinstance(spec, str):
        name = _ALIASES.get(spec.strip(), spec.strip().lower())
        function = BUILTIN.get(_ALIASES.get(name, name))
        if function is None:
            raise ClientConfigError(f"unknown serializer {spec!r}; expected one of "
                                    f"{', '.join(serializer_names())}, a callable or an "
                                    "object with serialize(topic, data)")
        return _guarded(lambda _topic, data: function(data), spec)
    if isinstance(spec, Serializer):
        return _guarded(spec.serialize, spec)
    if callable(spec):
        call = spec
        return _guarded(lambda _topic, data: call(data), spec)
    raise ClientConfigError(f"not a serializer: {spec!r}")


def _guarded(function: Callable[[str, Any], bytes | None], spec: object
             ) -> Callable[[str, Any], bytes | None]:
    def serialize(topic: str, data: Any) -> bytes | None:
        if data is None:
            return None
        try:
            out = function(topic, data)
        except SerializationError:
            raise
        except Exception as exc:
            raise SerializationError(f"serializing {type(data).__name__} with {spec!r} "
                                     f"failed: {exc}") from exc
        if out is not None and not isinstance(out, bytes):
            if isinstance(out, bytearray | memoryview):
                return bytes(out)
            raise SerializationError(f"serializer {spec!r} returned {type(out).__name__}, "
                                     "not bytes")
        return out

    return serialize
