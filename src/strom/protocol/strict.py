"""Strict structural check of a message body against its Kafka JSON schema (sans-io).

kafka-python's decoders (behind :mod:`strom.protocol.api`) are lenient: a string or bytes
field whose length runs past the end of the frame comes back shorter instead of failing (a
Metadata v1 request announcing a 32767-byte topic name with two bytes left decoded as the
topic ``ab``), and a null is accepted in any string, bytes or array field whatever the
schema says. Kafka's generated readers refuse both, and the broker closes the connection.
:func:`check_request` walks a body the way Kafka's readers do, before kafka-python decodes
it, and raises :class:`~strom.common.errors.InvalidRequestError` for:

* any field (length-prefixed or fixed-size) that runs past the end of the body;
* a null (negative length / count, compact 0, struct marker -1) in a field that is not
  nullable in this version (``nullableVersions`` in the schema);
* a string longer than 32767 bytes, a varint longer than 5 bytes;
* an array count larger than the bytes left (each element takes at least one byte);
* a tagged field whose size runs past its section, or a known tag whose value does not fill
  exactly its declared size.

Bytes after the body are tolerated, as Kafka does. UTF-8 validity is left to the decoder.
:func:`check_response` applies the same rules to a response (tests use it to prove the broker
never sends a null where Kafka's schema forbids one).

A check walks a plan compiled once per (message, version) from the JSON schema kafka-python
ships (Kafka's own ``clients/src/main/resources/common/message/*.json``, common structs
resolved). Plans are immutable and cached; the check itself holds no state.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from strom.common.errors import InvalidRequestError
from strom.protocol.primitives import Reader

_FIXED_SIZES = {
    "int8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "float64": 8,
    "uuid": 16,
    "bitfield": 4,  # kafka-python's patched type for Kafka's int32 authorized-operations sets
}
_LENGTH_PREFIXED = frozenset({"string", "bytes", "records"})
_MAX_STRING = 0x7FFF

# Plan node kinds.
_SKIP = 0  # a run of fixed-size fields: ``size`` bytes
_STRING = 1
_BYTES = 2
_ARRAY = 3  # of ``item`` (a _Field) or of a struct (``struct``)
_STRUCT = 4


@dataclass(frozen=True, slots=True)
class _Struct:
    """The fields of a struct in one version: untagged in wire order, tagged by tag."""

    fields: tuple[_Field, ...]
    tagged: dict[int, _Field]


@dataclass(frozen=True, slots=True)
class _Field:
    kind: int
    name: str
    nullable: bool = False
    size: int = 0  # _SKIP: bytes; _ARRAY of fixed items: the item size
    item: _Field | None = None  # _ARRAY of a simple type
    struct: _Struct | None = None  # _ARRAY of structs, _STRUCT


def _versions(spec: str | None) -> tuple[int, int] | None:
    if spec is None or not spec.strip() or spec.strip() == "none":
        return None
    spec = spec.strip()
    if spec.endswith("+"):
        return int(spec[:-1]), 0x7FFF
    low, _, high = spec.partition("-")
    return int(low), int(high or low)


def _in(spec: str | None, version: int) -> bool:
    bounds = _versions(spec)
    return bounds is not None and bounds[0] <= version <= bounds[1]


def _simple(kind: str, name: str, nullable: bool) -> _Field:
    if kind in _FIXED_SIZES:
        return _Field(_SKIP, name, size=_FIXED_SIZES[kind])
    if kind == "string":
        return _Field(_STRING, name, nullable)
    if kind in _LENGTH_PREFIXED:
        return _Field(_BYTES, name, nullable)
    raise ValueError(f"unknown schema type {kind!r} for field {name}")


def _field(spec: dict[str, Any], version: int) -> _Field:
    name = spec["name"]
    kind: str = spec["type"]
    nullable = _in(spec.get("nullableVersions"), version)
    if kind.startswith("[]"):
        inner = kind[2:]
        if "fields" in spec:
            return _Field(_ARRAY, name, nullable, struct=_struct(spec["fields"], version))
        item = _simple(inner, name, False)
        return _Field(_ARRAY, name, nullable, size=item.size, item=item)
    if "fields" in spec:
        return _Field(_STRUCT, name, nullable, struct=_struct(spec["fields"], version))
    return _simple(kind, name, nullable)


def _struct(specs: list[dict[str, Any]], version: int) -> _Struct:
    fields: list[_Field] = []
    tagged: dict[int, _Field] = {}
    for spec in specs:
        if not _in(spec.get("versions"), version):
            continue
        if "tag" in spec and _in(spec.get("taggedVersions"), version):
            tagged[int(spec["tag"])] = _field(spec, version)
            continue
        field = _field(spec, version)
        if field.kind == _SKIP and fields and fields[-1].kind == _SKIP:
            previous = fields.pop()
            field = _Field(_SKIP, f"{previous.name}..{field.name}", size=previous.size + field.size)
        fields.append(field)
    return _Struct(tuple(fields), tagged)


@cache
def _plan(api_key: int, kind: str, version: int) -> tuple[_Struct, bool]:
    from strom.protocol.api import request_class, response_class

    cls = request_class(api_key) if kind == "request" else response_class(api_key)
    schema: dict[str, Any] = cls._json
    return _struct(schema["fields"], version), _in(schema.get("flexibleVersions"), version)


def check_request(api_key: int, version: int, body: memoryview | bytes) -> None:
    """InvalidRequestError unless ``body`` is a well-formed request of this API and version."""
    struct, flexible = _plan(api_key, "request", version)
    _check_body(struct, flexible, body, "request")


def check_response(api_key: int, version: int, body: memoryview | bytes) -> None:
    """InvalidRequestError unless ``body`` is a well-formed response of this API and version."""
    struct, flexible = _plan(api_key, "response", version)
    _check_body(struct, flexible, body, "response")


def _check_body(struct: _Struct, flexible: bool, body: memoryview | bytes, what: str) -> None:
    reader = Reader(body)
    try:
        _check_struct(reader, struct, flexible)
    except _Malformed as exc:
        raise InvalidRequestError(
            f"malformed {what}: {exc.path or 'body'} {exc.problem} at byte {exc.position} "
            f"(body of {reader.size} bytes)"
        ) from None
    except InvalidRequestError as exc:  # a varint or size the Reader refused
        raise InvalidRequestError(f"malformed {what}: {exc}") from None


class _Malformed(Exception):
    def __init__(self, path: str, problem: str, position: int) -> None:
        super().__init__(path, problem, position)
        self.path = path
        self.problem = problem
        self.position = position


def _need(r: Reader, count: int, what: str) -> None:
    if count > r.size - r.pos:
        raise _Malformed("", f"{what} runs past the end", r.pos)
    r.pos += count


def _length(r: Reader, flexible: bool, wide: bool) -> int:
    """A length or count: compact uvarint N+1, else int32 (``wide``) or int16; -1 is null."""
    if flexible:
        return r.uvarint() - 1
    return r.int32() if wide else r.int16()


# The walk builds no path while the body is well formed: a _Malformed starts with the path
# relative to the field that raised it, and each enclosing field, element and struct puts
# its part in front as the exception passes through (``topics[3].name``).


def _check_struct(r: Reader, struct: _Struct, flexible: bool) -> None:
    for field in struct.fields:
        _check_field(r, field, flexible)
    if flexible:
        _check_tags(r, struct)


def _check_field(r: Reader, field: _Field, flexible: bool) -> None:
    kind = field.kind
    if kind == _SKIP:
        if field.size > r.size - r.pos:
            raise _Malformed(field.name, f"{field.size}-byte field runs past the end", r.pos)
        r.pos += field.size
        return
    try:
        _check_value(r, field, kind, flexible)
    except _Malformed as exc:
        exc.path = field.name + exc.path
        raise


def _check_value(r: Reader, field: _Field, kind: int, flexible: bool) -> None:
    at = r.pos
    if kind == _STRUCT:
        if field.nullable:  # int8 marker: -1 null, else present (KIP-893)
            marker = r.int8()
            if marker == -1:
                return
            if marker < 0:
                raise _Malformed("", f"has null marker {marker}", at)
        assert field.struct is not None
        try:
            _check_struct(r, field.struct, flexible)
        except _Malformed as exc:
            exc.path = "." + exc.path
            raise
        return
    length = _length(r, flexible, wide=kind != _STRING)
    if length < 0:
        if not field.nullable:
            raise _Malformed("", "is null where the schema forbids it", at)
        return
    if kind == _STRING:
        if length > _MAX_STRING:
            raise _Malformed("", f"string length {length} exceeds {_MAX_STRING}", at)
        _need(r, length, f"string of {length} bytes")
    elif kind == _BYTES:
        _need(r, length, f"{length} bytes")
    elif field.size:  # an array of fixed-size items
        _need(r, length * field.size, f"array of {length} elements")
    else:
        if length > r.size - r.pos:
            raise _Malformed("", f"array of {length} elements runs past the end", at)
        struct, item = field.struct, field.item
        index = 0
        try:
            for index in range(length):  # noqa: B007 (read below)
                if struct is not None:
                    _check_struct(r, struct, flexible)
                else:
                    assert item is not None
                    _check_field(r, item, flexible)
        except _Malformed as exc:
            exc.path = f"[{index}]{'.' if struct is not None else ''}{exc.path}"
            raise


def _check_tags(r: Reader, struct: _Struct) -> None:
    buf = r.buf
    if r.pos < r.size and buf[r.pos] == 0:  # the usual, empty section
        r.pos += 1
        return
    for _ in range(r.uvarint()):
        tag = r.uvarint()
        size = r.uvarint()
        start = r.pos
        try:
            _need(r, size, f"tagged field of {size} bytes")
        except _Malformed as exc:
            exc.path = f"<tag {tag}>"
            raise
        field = struct.tagged.get(tag)
        if field is None:
            continue  # unknown tags are skipped, as Kafka does
        inner = Reader(buf[start : start + size])
        _check_field(inner, field, True)
        if inner.pos != size:
            raise _Malformed(field.name, f"fills {inner.pos} of its {size} tagged bytes", start)
