"""Varint / zigzag helpers and single-record encoding, against kafka-python's implementations."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record import util as kafka_util
from kafka.record.default_records import DefaultRecordBatchBuilder

from strom.common.errors import CorruptMessageError
from strom.protocol.records.record import (
    decode_uvarint,
    decode_varint,
    decode_varlong,
    encode_record,
    encode_uvarint,
    encode_varint,
    record_size,
    size_of_varint,
    zigzag_decode,
    zigzag_encode,
)

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)


def _kafka_varint(value: int) -> bytes:
    out = bytearray()
    kafka_util.encode_varint(value, out.append)
    return bytes(out)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (63, b"\x7e"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (300, b"\xd8\x04"),
        (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
        (-(2**31), b"\xff\xff\xff\xff\x0f"),
        (-(2**63), b"\xff" * 9 + b"\x01"),
    ],
)
def test_known_varints(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert decode_varint(encoded, 0, 10) == (value, len(encoded))
    assert size_of_varint(value) == len(encoded)


@given(INT64)
def test_varlong_matches_kafka_python(value: int) -> None:
    encoded = encode_varint(value)
    assert encoded == _kafka_varint(value)
    assert decode_varlong(encoded) == (value, len(encoded))
    assert size_of_varint(value) == len(encoded) == kafka_util.size_of_varint(value)
    assert zigzag_decode(zigzag_encode(value)) == value


@given(INT32)
def test_varint_fits_five_bytes(value: int) -> None:
    encoded = encode_varint(value)
    assert len(encoded) <= 5
    assert decode_varint(b"\xaa" + encoded, 1) == (value, 1 + len(encoded))


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_uvarint_round_trip(value: int) -> None:
    encoded = encode_uvarint(value)
    assert decode_uvarint(encoded) == (value, len(encoded))


def test_varint_errors() -> None:
    with pytest.raises(CorruptMessageError):
        decode_varint(b"")
    with pytest.raises(CorruptMessageError):
        decode_varint(b"\x80\x80")  # truncated
    with pytest.raises(CorruptMessageError):
        decode_varint(b"\x80\x80\x80\x80\x80\x01")  # 6 bytes for an int32 varint
    with pytest.raises(CorruptMessageError):
        decode_varlong(b"\x80" * 10 + b"\x01")  # 11 bytes
    with pytest.raises(ValueError):
        encode_uvarint(-1)


HEADERS = st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=4)


@given(
    offset_delta=st.integers(min_value=0, max_value=2**31 - 1),
    timestamp_delta=INT64.filter(lambda v: -(2**62) < v < 2**62),
    key=st.none() | st.binary(max_size=200),
    value=st.none() | st.binary(max_size=300),
    headers=HEADERS,
)
def test_encode_record_matches_kafka_python(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes | None]],
) -> None:
    encoded = encode_record(offset_delta, timestamp_delta, key, value, headers)
    assert len(encoded) == record_size(offset_delta, timestamp_delta, key, value, headers)
    assert len(encoded) == DefaultRecordBatchBuilder.size_in_bytes(
        offset_delta, timestamp_delta, key, value, headers
    )
    # kafka-python's timestamp delta is relative to the first record: the second record of
    # its batch is the last bytes of the batch.
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 30)
    builder.append(0, 10**13, None, None, [])
    builder.append(offset_delta, 10**13 + timestamp_delta, key, value, headers)
    assert bytes(builder.build()).endswith(encoded)
