"""Kafka wire primitives: known vectors, round trips, kio as an oracle, malformed input."""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.common.errors import InvalidRequestError
from strom.protocol import primitives as p
from strom.protocol.primitives import Reader

kio_writers = pytest.importorskip("kio.serial.writers")
kio_readers = pytest.importorskip("kio.serial.readers")


def kio_bytes(write: Callable[[Any, Any], None], value: Any) -> bytes:
    buffer = io.BytesIO()
    write(buffer, value)
    return buffer.getvalue()


# -- known vectors ---------------------------------------------------------------------------

UVARINTS = [
    (0, "00"),
    (1, "01"),
    (127, "7f"),
    (128, "8001"),
    (300, "ac02"),
    (16383, "ff7f"),
    (16384, "808001"),
    (2**31 - 1, "ffffffff07"),
    (2**32 - 1, "ffffffff0f"),
]

VARINTS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (-2, "03"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (2**31 - 1, "feffffff0f"),
    (-(2**31), "ffffffff0f"),
]


@pytest.mark.parametrize(("value", "hex_"), UVARINTS)
def test_uvarint_vectors(value: int, hex_: str) -> None:
    assert p.write_uvarint(value).hex() == hex_
    reader = Reader(bytes.fromhex(hex_))
    assert reader.uvarint() == value
    assert reader.at_end()


@pytest.mark.parametrize(("value", "hex_"), VARINTS)
def test_varint_vectors(value: int, hex_: str) -> None:
    assert p.write_varint(value).hex() == hex_
    assert Reader(bytes.fromhex(hex_)).varint() == value


def test_varlong_extremes() -> None:
    for value in (0, -1, 2**63 - 1, -(2**63), 2**40, -(2**40)):
        data = p.write_varlong(value)
        assert Reader(data).varlong() == value
    assert len(p.write_varlong(-(2**63))) == 10
    assert Reader(p.write_uvarint(2**64 - 1)).uvarlong() == 2**64 - 1


def test_overlong_varints_are_rejected() -> None:
    with pytest.raises(InvalidRequestError):
        Reader(bytes.fromhex("ffffffffff01")).uvarint()  # 6 bytes for a 32-bit varint
    with pytest.raises(InvalidRequestError):
        Reader(b"\xff" * 10 + b"\x01").uvarlong()  # 11 bytes for a 64-bit varlong
    with pytest.raises(InvalidRequestError):
        Reader(b"\x80\x80").uvarint()  # truncated: continuation bit on the last byte
    with pytest.raises(InvalidRequestError):
        Reader(b"").varint()


def test_writers_reject_out_of_range() -> None:
    with pytest.raises(ValueError):
        p.write_uvarint(-1)
    with pytest.raises(ValueError):
        p.write_varint(2**31)
    with pytest.raises(ValueError):
        p.write_varlong(-(2**63) - 1)
    with pytest.raises(ValueError):
        p.write_string("x" * 0x8000)
    with pytest.raises(ValueError):
        p.write_uuid(b"short")


def test_fixed_width_round_trip_and_truncation() -> None:
    data = (
        p.write_int8(-128)
        + p.write_boolean(True)
        + p.write_int16(-2)
        + p.write_uint16(65535)
        + p.write_int32(-(2**31))
        + p.write_uint32(2**32 - 1)
        + p.write_int64(2**63 - 1)
    )
    r = Reader(data)
    assert r.int8() == -128
    assert r.boolean() is True
    assert r.int16() == -2
    assert r.uint16() == 65535
    assert r.int32() == -(2**31)
    assert r.uint32() == 2**32 - 1
    assert r.int64() == 2**63 - 1
    assert r.remaining == 0
    for method in ("int8", "int16", "uint16", "int32", "uint32", "int64", "uuid"):
        with pytest.raises(InvalidRequestError):
            getattr(Reader(b""), method)()
    with pytest.raises(InvalidRequestError):
        Reader(b"\x00\x00\x00").int32()
    with pytest.raises(InvalidRequestError):
        Reader(b"\x00" * 7).unpack(struct.Struct(">iq"))


def test_strings() -> None:
    data = (
        p.write_string("héllo")
        + p.write_nullable_string(None)
        + p.write_compact_string("")
        + p.write_compact_nullable_string(None)
        + p.write_compact_nullable_string("ü")
    )
    r = Reader(data)
    assert r.string() == "héllo"
    assert r.nullable_string() is None
    assert r.compact_string() == ""
    assert r.compact_nullable_string() is None
    assert r.compact_nullable_string() == "ü"
    assert r.at_end()


@pytest.mark.parametrize(
    ("method", "data"),
    [
        ("string", b"\xff\xff"),  # null where not allowed
        ("string", b"\xff\xfe"),  # negative length
        ("nullable_string", b"\xff\xfe"),
        ("string", b"\x00\x05abc"),  # truncated
        ("string", b"\x00\x02\xff\xfe"),  # not UTF-8
        ("compact_string", b"\x00"),
        ("compact_string", b"\x05ab"),
        ("compact_nullable_string", b"\x03\xc3\x28"),
        ("bytes_", b"\xff\xff\xff\xff"),
        ("bytes_", b"\x00\x00\x00\x09abc"),
        ("nullable_bytes", b"\xff\xff\xff\xfe"),
        ("compact_bytes", b"\x00"),
        ("compact_nullable_bytes", b"\x09ab"),
        ("array_length", b"\xff\xff\xff\xfe"),
        ("array_length", b"\x7f\xff\xff\xff"),  # more elements than bytes left
        ("compact_array_length", b"\xff\xff\xff\xff\x07"),
        ("skip_tagged_fields", b"\x01\x00\x05ab"),
        ("tagged_fields", b"\x02\x00\x00"),
    ],
)
def test_malformed_input_raises_invalid_request(method: str, data: bytes) -> None:
    with pytest.raises(InvalidRequestError):
        getattr(Reader(data), method)()


def test_bytes_are_slices_not_copies() -> None:
    frame = bytearray(p.write_bytes(b"abc") + p.write_compact_bytes(b"defg") + b"\xff\xff\xff\xff")
    r = Reader(memoryview(frame))
    first = r.bytes_()
    second = r.compact_nullable_bytes()
    assert bytes(first) == b"abc" and second is not None and bytes(second) == b"defg"
    assert first.obj is frame and second.obj is frame
    frame[4] = ord("X")  # a view, so it sees the change
    assert bytes(first) == b"Xbc"
    assert r.nullable_bytes() is None


def test_reader_casts_other_memoryview_formats() -> None:
    data = memoryview(struct.pack(">ii", 1, 2)).cast("i")
    assert Reader(data).int32() == 1


def test_uuid() -> None:
    value = bytes(range(16))
    assert Reader(p.write_uuid(value)).uuid() == value
    assert p.write_uuid(None) == p.ZERO_UUID


def test_arrays() -> None:
    items = [1, -2, 3]
    data = p.write_array(items, p.write_int32) + p.write_array(None, p.write_int32)
    data += p.write_compact_array(items, p.write_int32) + p.write_compact_array(None, p.write_int32)
    r = Reader(data)
    assert r.array(Reader.int32) == items
    assert r.nullable_array(Reader.int32) is None
    assert r.compact_array(Reader.int32) == items
    assert r.compact_nullable_array(Reader.int32) is None
    with pytest.raises(InvalidRequestError):
        Reader(p.write_array_length(None)).array(Reader.int32)
    with pytest.raises(InvalidRequestError):
        Reader(p.write_compact_array_length(None)).compact_array(Reader.int32)
    assert p.write_array_length(0) == b"\x00\x00\x00\x00"
    assert p.write_compact_array_length(0) == b"\x01"


def test_tagged_fields_write_only_given_tags_in_order() -> None:
    assert p.write_tagged_fields() == b"\x00"
    assert p.write_tagged_fields({}) == b"\x00"
    data = p.write_tagged_fields({5: b"xy", 1: b""})
    assert data.hex() == "02" + "0100" + "05027879"
    r = Reader(data + b"\x07")
    assert [(tag, bytes(value)) for tag, value in r.tagged_fields()] == [(1, b""), (5, b"xy")]
    assert r.int8() == 7
    r = Reader(data + b"\x07")
    r.skip_tagged_fields()
    assert r.int8() == 7
    big = p.write_tagged_fields([(200, b"z" * 300)])
    r = Reader(big)
    ((tag, value),) = r.tagged_fields()
    assert tag == 200 and bytes(value) == b"z" * 300 and r.at_end()


# -- kio as an oracle ------------------------------------------------------------------------


@given(st.integers(min_value=0, max_value=2**31 - 1))
def test_uvarint_matches_kio(value: int) -> None:
    encoded = p.write_uvarint(value)
    assert encoded == kio_bytes(kio_writers.write_unsigned_varint, value)
    assert kio_readers.read_unsigned_varint(encoded, 0) == (value, len(encoded))
    assert Reader(encoded).uvarint() == value


@given(st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_varint_matches_kio(value: int) -> None:
    encoded = p.write_varint(value)
    assert encoded == kio_bytes(kio_writers.write_signed_varint, value)
    assert Reader(encoded).varint() == value


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varlong_matches_kio(value: int) -> None:
    encoded = p.write_varlong(value)
    assert encoded == kio_bytes(kio_writers.write_signed_varlong, value)
    assert Reader(encoded).varlong() == value


@given(st.one_of(st.none(), st.text(max_size=200)))
def test_strings_match_kio(value: str | None) -> None:
    compact = p.write_compact_nullable_string(value)
    legacy = p.write_nullable_string(value)
    assert compact == kio_bytes(kio_writers.write_nullable_compact_string, value)
    assert legacy == kio_bytes(kio_writers.write_nullable_legacy_string, value)
    assert Reader(compact).compact_nullable_string() == value
    assert Reader(legacy).nullable_string() == value


@given(st.binary(max_size=300))
def test_bytes_match_kio(value: bytes) -> None:
    assert p.write_bytes(value) == kio_bytes(kio_writers.write_legacy_bytes, value)
    assert bytes(Reader(p.write_compact_bytes(value)).compact_bytes()) == value


# -- fuzz ------------------------------------------------------------------------------------

READ_METHODS = [
    "int8", "int16", "uint16", "int32", "uint32", "int64", "uvarint", "uvarlong", "varint",
    "varlong", "string", "nullable_string", "compact_string", "compact_nullable_string",
    "bytes_", "nullable_bytes", "compact_bytes", "compact_nullable_bytes", "uuid",
    "array_length", "compact_array_length", "skip_tagged_fields", "tagged_fields",
]


@given(st.binary(max_size=64), st.lists(st.sampled_from(READ_METHODS), min_size=1, max_size=12))
def test_random_input_only_raises_invalid_request(data: bytes, methods: list[str]) -> None:
    r = Reader(data)
    try:
        for method in methods:
            getattr(r, method)()
    except InvalidRequestError:
        pass
    assert 0 <= r.pos <= len(data)
