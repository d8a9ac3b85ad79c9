"""decode_record_tuples: the C record loop (``_record_decode``) against its Python twin.

The Python loop is the specification: on any input both return equal records (same types,
item by item) or both raise CorruptMessageError. Valid batches come from the builder (headers,
null keys and values, wide timestamp deltas, compressed, LogAppendTime); hand-written records
sections reach the varint edges (5-byte varints with high bits, 10-byte varlongs, overlong
encodings, non-canonical zeros) and mutated batches everything else. Every test here also
runs with the C loop switched off, so the fallback is exercised where the extension is built.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.native_twins import choose_implementation
from tests.storage.helpers import batch_around

from strom.common.errors import CorruptMessageError
from strom.protocol.records import reader
from strom.protocol.records.batch import TIMESTAMP_TYPE_MASK, parse_header
from strom.protocol.records.builder import BatchBuilder
from strom.protocol.records.compression import Compression, compress
from strom.protocol.records.reader import TupleLayout, decode_record_tuples, decode_records
from strom.protocol.records.record import encode_uvarint

NATIVE = reader.native_decode
NOW = 1_700_000_000_000
INT64_MAX = 2**63 - 1


@pytest.fixture(autouse=True, params=["native", "python"])
def implementation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    return choose_implementation(request, monkeypatch, reader, "native_decode")


def needs_both(implementation: str) -> None:
    if NATIVE is None or implementation == "python":
        pytest.skip("compares the C loop with the Python one")


class Fetched(NamedTuple):
    """Shaped like the client's ConsumerRecord."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    leader_epoch: int


class Plain(NamedTuple):
    headers: Any
    value: Any
    extra: Any
    key: Any
    timestamp: Any
    offset: Any


#: A record like the client's, a plain tuple and a NamedTuple with the fields in another order.
LAYOUTS = [
    TupleLayout(Fetched, ("topic", 3, None, None, 0, None, None, (), 7), (2, 3, 5, 6, 7)),
    TupleLayout(tuple, (None,) * 5, (0, 1, 2, 3, 4)),
    TupleLayout(Plain, (None, None, "x", None, None, None), (5, 4, 3, 1, 0)),
]


def outcome(buf: bytes | bytearray | memoryview, layout: TupleLayout,
            native: bool) -> list[Any] | str:
    """The decoded records of the one batch in ``buf``, or ``"corrupt"``."""
    header = parse_header(buf)
    saved = reader.native_decode
    reader.native_decode = NATIVE if native else None
    try:
        return decode_record_tuples(buf, header, layout)
    except CorruptMessageError:
        return "corrupt"
    finally:
        reader.native_decode = saved


def typed(result: list[Any] | str) -> Any:
    """``result`` with the type of every record and item, so ``b"" != None`` and a tuple
    subclass differs from a tuple even where ``==`` would not tell."""
    if isinstance(result, str):
        return result
    return [(type(r), [(type(item), item) for item in r]) for r in result]


def agree(buf: bytes | bytearray | memoryview, layout: TupleLayout = LAYOUTS[0]) -> Any:
    c, python = outcome(buf, layout, True), outcome(buf, layout, False)
    assert typed(c) == typed(python)
    return c


# -- valid batches ----------------------------------------------------------------------------
_headers = st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=6))),
                    max_size=3)
_records = st.lists(st.tuples(
    st.one_of(st.integers(-5000, 5000), st.integers(-(2**40), 2**40)),
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=120)),
    _headers), min_size=1, max_size=60)


@settings(max_examples=200, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(records=_records, codec=st.sampled_from([Compression.NONE, Compression.LZ4]),
       log_append_time=st.booleans(), base_offset=st.sampled_from([0, 5, 2**40, INT64_MAX]),
       layout=st.sampled_from(LAYOUTS))
def test_valid_batches_decode_to_equal_records(
        implementation: str, records: list[tuple[int, bytes | None, bytes | None, Any]],
        codec: int, log_append_time: bool, base_offset: int, layout: TupleLayout) -> None:
    builder = BatchBuilder(compression=codec)
    for delta, key, value, headers in records:
        builder.append(NOW + delta, key, value, headers)
    batch = bytearray(builder.build())
    struct.pack_into(">q", batch, 0, base_offset)  # not covered by the CRC
    if log_append_time:  # the same records; max_timestamp becomes every record's time
        batch = batch_around(bytes(batch[61:]), len(records), attributes=codec
                             | TIMESTAMP_TYPE_MASK, base_ts=NOW, max_ts=NOW + 99,
                             base_offset=base_offset)
    decoded = outcome(batch, layout, implementation == "native")
    assert not isinstance(decoded, str)
    expected = decode_records(bytes(batch), parse_header(batch))  # the Record decoder
    at_offset, at_timestamp, at_key, at_value, at_headers = layout.slots
    assert [(r[at_offset], r[at_timestamp], r[at_key], r[at_value], list(r[at_headers]))
            for r in decoded] == [(e.offset, e.timestamp, e.key, e.value, e.headers)
                                  for e in expected]
    # Offsets past int64 (a hostile base offset) stay exact, as Python ints.
    assert decoded[-1][at_offset] == base_offset + len(records) - 1
    assert all(type(r) is layout.cls and type(r[at_headers]) is tuple for r in decoded)
    if log_append_time:
        assert {r[at_timestamp] for r in decoded} == {NOW + 99}
    if implementation == "native":
        agree(batch, layout)


# -- hand-written records: varint edges -------------------------------------------------------
def uvarint_bytes(raw: int, width: int) -> bytes:
    """``raw`` as LEB128 padded to ``width`` bytes (non-canonical when longer than needed);
    bits beyond what ``width`` bytes hold are dropped."""
    out = bytearray()
    for i in range(width):
        group = (raw >> (7 * i)) & 0x7F
        out.append(group | (0x80 if i < width - 1 else 0))
    return bytes(out)


def zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


@st.composite
def varint_field(draw: st.DrawFn, wide: bool = False) -> bytes:
    """A varint (varlong when ``wide``) as a client or a hostile broker might write it."""
    max_width = 10 if wide else 5
    choice = draw(st.integers(0, 3))
    if choice == 0:  # canonical, small
        return encode_uvarint(zigzag(draw(st.integers(-200, 200))))
    if choice == 1:  # padded to a fixed width, any bits (high bits of the last byte too)
        width = draw(st.integers(1, max_width))
        return uvarint_bytes(draw(st.integers(0, 2**70)), width)
    if choice == 2:  # overlong: one continuation byte too many
        return b"\x80" * max_width + b"\x00"
    return encode_uvarint(zigzag(draw(st.integers(-(2**31), 2**31 - 1))))


@st.composite
def record_body(draw: st.DrawFn) -> bytes:
    """A record's fields after its length: sometimes sound, sometimes not."""
    parts = [bytes([draw(st.integers(0, 255))]), draw(varint_field(wide=True)),
             draw(varint_field())]
    for _ in range(2):  # key, value
        data = draw(st.one_of(st.none(), st.binary(max_size=8)))
        parts.append(b"\x01" if data is None else encode_uvarint(zigzag(len(data))) + data)
    headers = draw(st.lists(st.tuples(st.binary(max_size=4), st.one_of(st.none(),
                                                                      st.binary(max_size=4))),
                            max_size=2))
    parts.append(draw(st.sampled_from([encode_uvarint(zigzag(len(headers))),
                                       uvarint_bytes(zigzag(len(headers)), 3)])))
    for key, value in headers:
        parts.append(encode_uvarint(zigzag(len(key))) + key)
        parts.append(b"\x01" if value is None else encode_uvarint(zigzag(len(value))) + value)
    body = b"".join(parts)
    if draw(st.integers(0, 5)) == 0:  # a field that runs on, or stops short
        body = body[: draw(st.integers(0, len(body)))] + draw(st.binary(max_size=3))
    return body


@settings(max_examples=600, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(bodies=st.lists(record_body(), min_size=1, max_size=6), data=st.data())
def test_hand_written_records_agree(implementation: str, bodies: list[bytes],
                                    data: st.DataObject) -> None:
    needs_both(implementation)
    section = b"".join(encode_uvarint(zigzag(len(b) + data.draw(st.sampled_from([0, 0, 0, 1, -1]))))
                       + b for b in bodies)
    count = len(bodies) + data.draw(st.sampled_from([0, 0, 0, 1, -1]))
    agree(batch_around(section, count), data.draw(st.sampled_from(LAYOUTS)))


@pytest.mark.parametrize(("raw", "expected"), [
    (uvarint_bytes(zigzag(2**31 - 1), 5), 2**31 - 1),
    (uvarint_bytes(zigzag(-(2**31)), 5), -(2**31)),
    (uvarint_bytes(0xFF_FFFF_FFFF, 5), -(2**31)),  # 35 bits written, Kafka keeps 32
    (uvarint_bytes(6, 5), 3),  # padded: 86 80 80 80 00
])
def test_offset_delta_varints_read_as_kafka_reads_them(implementation: str, raw: bytes,
                                                       expected: int) -> None:
    body = b"\x00" + b"\x00" + raw + b"\x01" + b"\x01" + b"\x00"
    batch = batch_around(encode_uvarint(zigzag(len(body))) + body, 1)
    (record,) = outcome(batch, LAYOUTS[1], implementation == "native")
    assert record[0] == expected


@pytest.mark.parametrize(("raw", "expected"), [
    (uvarint_bytes(zigzag(2**63 - 1), 10), 2**63 - 1),
    (uvarint_bytes(zigzag(-(2**63)), 10), -(2**63)),
    (uvarint_bytes(2**70 - 1, 10), -(2**63)),  # 70 bits written, Kafka keeps 64
])
def test_timestamp_delta_varlongs_read_as_kafka_reads_them(implementation: str, raw: bytes,
                                                           expected: int) -> None:
    body = b"\x00" + raw + b"\x00" + b"\x01" + b"\x01" + b"\x00"
    batch = batch_around(encode_uvarint(zigzag(len(body))) + body, 1, base_ts=NOW)
    (record,) = outcome(batch, LAYOUTS[1], implementation == "native")
    assert record[1] == NOW + expected  # exact, past int64 too


@pytest.mark.parametrize("body", [
    pytest.param(b"\x00" + b"\x80" * 10 + b"\x00" + b"\x00\x01\x01\x00", id="varlong-11-bytes"),
    pytest.param(b"\x00\x00" + b"\x80" * 5 + b"\x00" + b"\x01\x01\x00", id="varint-6-bytes"),
    pytest.param(b"\x00\x00\x00\x03\x01\x00", id="key-length--2"),
    pytest.param(b"\x00\x00\x00\x01\x05\x00", id="value-length--3"),
    pytest.param(b"\x00\x00\x00\x01\x01\x02\x01", id="header-key-length--1"),
    pytest.param(b"\x00\x00\x00\x01\x01\x02\x02\xff\x01", id="header-key-not-utf8"),
    pytest.param(b"\x00\x00\x00\x01\x01\x02\x00\x05", id="header-value-length--3"),
    pytest.param(b"\x00\x00\x00\x01\x01\x7e", id="header-count-63"),
    pytest.param(b"\x00\x00\x00\x08ab\x01\x00", id="key-runs-past-the-record"),
    pytest.param(b"\x00\x00\x00\x01\x01\x00\x00", id="a-byte-after-the-fields"),
])
def test_malformed_records_are_corrupt(implementation: str, body: bytes) -> None:
    """The record claims its exact size; the fault is inside it. A byte follows the batch in
    the buffer, so a loop that over-read would find something there."""
    batch = batch_around(encode_uvarint(zigzag(len(body))) + body, 1) + b"\x00" * 16
    assert outcome(batch, LAYOUTS[0], implementation == "native") == "corrupt"
    if implementation == "native":
        agree(batch)


def test_a_record_longer_than_its_batch_is_corrupt_though_bytes_follow(implementation: str
                                                                        ) -> None:
    body = b"\x00\x00\x00\x01\x01\x00"
    section = encode_uvarint(zigzag(len(body) + 4)) + body
    buffer = batch_around(section, 1) + b"\x00" * 4  # the 4 missing bytes, past the batch
    assert outcome(buffer, LAYOUTS[0], implementation == "native") == "corrupt"


def test_bad_layouts_are_type_errors() -> None:
    if NATIVE is None:
        pytest.skip("the C record decoder is not built")
    batch = bytes(batch_around(b"\x0c\x00\x00\x00\x01\x01\x00", 1))
    with pytest.raises(TypeError):
        NATIVE(batch, 61, len(batch), 1, 0, 0, None, list, (None,) * 5, (0, 1, 2, 3, 4))
    with pytest.raises(ValueError, match="distinct"):
        NATIVE(batch, 61, len(batch), 1, 0, 0, None, tuple, (None,) * 5, (0, 0, 2, 3, 4))
    with pytest.raises(IndexError):
        NATIVE(batch, 61, len(batch) + 1, 1, 0, 0, None, tuple, (None,) * 5, (0, 1, 2, 3, 4))


# -- mutated batches --------------------------------------------------------------------------
@settings(max_examples=600, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mutated_batches_agree(implementation: str, data: st.DataObject) -> None:
    needs_both(implementation)
    builder = BatchBuilder()
    for i in range(data.draw(st.integers(1, 12))):
        builder.append(NOW + data.draw(st.integers(-10**6, 10**6)),
                       data.draw(st.one_of(st.none(), st.binary(max_size=10))),
                       data.draw(st.one_of(st.none(), st.binary(max_size=30))),
                       [("k\u00e9", b"v"), ("x", None)] if i % 4 == 1 else [])
    records = bytearray(builder.build()[61:])
    for _ in range(data.draw(st.integers(1, 4))):
        records[data.draw(st.integers(0, len(records) - 1))] = data.draw(st.integers(0, 255))
    records = records[: len(records) - data.draw(st.integers(0, 2))]
    count = builder.records_count + data.draw(st.sampled_from([0, 0, 0, 1, -1]))
    codec = data.draw(st.sampled_from([Compression.NONE, Compression.NONE, Compression.GZIP]))
    section = compress(codec, bytes(records))
    agree(batch_around(section, count, attributes=codec), data.draw(st.sampled_from(LAYOUTS)))
