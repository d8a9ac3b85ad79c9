"""Golden bytes and differential tests against independent codecs: kafka-python's
``DefaultRecordBatchBuilder`` / ``DefaultRecordBatch`` and kio's record batch reader / writer."""

from __future__ import annotations

import datetime
import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kio.records.readers import read_batch
from kio.records.schema import NewRecordBatch, RecordHeader
from kio.records.schema import Record as KioRecord
from kio.records.writers import write_new_batch
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

from strom.protocol.records.batch import iter_batches
from strom.protocol.records.builder import BatchBuilder
from strom.protocol.records.compression import Compression
from strom.protocol.records.reader import decode_batches
from strom.protocol.records.record import Record

Input = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]

# Built by kafka-python 3.0.12 DefaultRecordBatchBuilder (magic 2, no compression, no producer
# id) from GOLDEN_INPUT: header (base offset 0, batch length 101, leader epoch 0, magic 2,
# crc 0xbd02666d, attributes 0, last offset delta 2, base / max timestamp 1700000000000 /
# 1700000000005, producer id / epoch / sequence -1, 3 records), then the records. Record 2 has
# a negative timestamp delta (-10: zigzag 0x13), record 1 a null key and a null header value.
GOLDEN_HEX = (
    "0000000000000000"  # base offset
    "00000065"  # batch length
    "00000000"  # partition leader epoch (kafka-python writes 0; Java writes -1)
    "02"  # magic
    "bd02666d"  # crc-32c
    "0000"  # attributes
    "00000002"  # last offset delta
    "0000018bcfe56800"  # base timestamp
    "0000018bcfe56805"  # max timestamp
    "ffffffffffffffff"  # producer id
    "ffff"  # producer epoch
    "ffffffff"  # base sequence
    "00000003"  # records count
    "1a000000046b300a68656c6c6f00"  # len 13, attrs, ts+0, off 0, key "k0", value "hello", 0 hdrs
    "38000a02010a776f726c64040a7472616365066162630a656d70747901"  # null key, 2 headers
    "10001304046b320100"  # ts -10, offset 2, key "k2", null value
)
GOLDEN_INPUT: list[Input] = [
    (1_700_000_000_000, b"k0", b"hello", []),
    (1_700_000_000_005, None, b"world", [("trace", b"abc"), ("empty", None)]),
    (1_699_999_999_990, b"k2", None, []),
]


def _kafka_python_batch(
    inputs: list[Input],
    codec: int = 0,
    producer: tuple[int, int, int] = (-1, -1, -1),
    transactional: bool = False,
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=transactional,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        batch_size=1 << 30,
    )
    for offset, (timestamp, key, value, headers) in enumerate(inputs):
        assert builder.append(offset, timestamp, key, value, headers) is not None
    return bytes(builder.build())


def _strom_batch(
    inputs: list[Input],
    codec: int = 0,
    producer: tuple[int, int, int] = (-1, -1, -1),
    transactional: bool = False,
    partition_leader_epoch: int = -1,
) -> bytes:
    builder = BatchBuilder(
        compression=codec,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        transactional=transactional,
        partition_leader_epoch=partition_leader_epoch,
    )
    for timestamp, key, value, headers in inputs:
        builder.append(timestamp, key, value, headers)
    return builder.build()


def _as_records(inputs: list[Input], base_offset: int = 0) -> list[Record]:
    return [
        Record(base_offset + i, ts, key, value, list(headers))
        for i, (ts, key, value, headers) in enumerate(inputs)
    ]


def _kafka_python_decode(data: bytes) -> list[Record]:
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    return [
        Record(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in batch
    ]


def test_golden_hex_decodes() -> None:
    golden = bytes.fromhex(GOLDEN_HEX)
    [(header, records)] = decode_batches(golden)
    assert (header.base_timestamp, header.max_timestamp) == (1_700_000_000_000, 1_700_000_000_005)
    assert header.crc == 0xBD02666D
    assert records == _as_records(GOLDEN_INPUT)


def test_golden_hex_is_what_both_builders_write() -> None:
    golden = bytes.fromhex(GOLDEN_HEX)
    assert _kafka_python_batch(GOLDEN_INPUT) == golden
    assert _strom_batch(GOLDEN_INPUT, partition_leader_epoch=0) == golden
    # strom's default leader epoch (-1, like Java) is outside the CRC: only bytes 12-16 differ.
    ours = _strom_batch(GOLDEN_INPUT)
    assert ours[:12] + ours[16:] == golden[:12] + golden[16:]
    assert ours[12:16] == b"\xff\xff\xff\xff"


def _json_input(i: int) -> Input:
    """Record i of a 1000-record batch: null keys / values and headers sprinkled in,
    timestamps out of order (negative deltas)."""
    value = json.dumps({"id": i, "name": f"n{i}", "tags": ["x"] * (i % 5)}).encode()
    headers: list[tuple[str, bytes | None]] = []
    if i % 3 == 0:
        headers = [("trace-id", f"{i:08x}".encode())]
    elif i % 7 == 0:
        headers = [("nil", None)]
    return (
        1_700_000_000_000 + (i * 37) % 1000 - 300,
        None if i % 4 == 0 else f"user-{i % 50}".encode(),
        None if i % 97 == 0 else value,
        headers,
    )


JSON_INPUT: list[Input] = [_json_input(i) for i in range(1000)]


@pytest.mark.parametrize("codec", list(Compression))
def test_kafka_python_batches_decode_identically(codec: int) -> None:
    data = _kafka_python_batch(JSON_INPUT, codec, producer=(1234, 5, 600), transactional=True)
    [(header, records)] = decode_batches(data)
    # kafka-python sends a batch uncompressed when compression does not shrink it.
    assert header.compression in (codec, Compression.NONE)
    assert header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (1234, 5, 600)
    assert records == _as_records(JSON_INPUT)
    assert records == _kafka_python_decode(data)


@pytest.mark.parametrize("codec", list(Compression))
def test_strom_batches_decode_identically_with_kafka_python(codec: int) -> None:
    data = _strom_batch(JSON_INPUT, codec, producer=(1234, 5, 600), transactional=True)
    [header] = iter_batches(data)
    assert header.compression == codec
    batch = DefaultRecordBatch(data)
    assert (batch.compression_type, batch.is_transactional) == (codec, True)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (1234, 5, 600)
    assert batch.max_timestamp == max(ts for ts, _, _, _ in JSON_INPUT)
    assert _kafka_python_decode(data) == _as_records(JSON_INPUT)


def test_uncompressed_bytes_equal_kafka_python_for_many_records() -> None:
    expected = _kafka_python_batch(JSON_INPUT, producer=(9, 1, 0), transactional=True)
    ours = _strom_batch(
        JSON_INPUT, producer=(9, 1, 0), transactional=True, partition_leader_epoch=0
    )
    assert ours == expected


HEADERS = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=16)), max_size=3)
INPUTS = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=2**50),
        st.none() | st.binary(max_size=40),
        st.none() | st.binary(max_size=200),
        HEADERS,
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(INPUTS)
def test_uncompressed_bytes_equal_kafka_python_property(inputs: list[Input]) -> None:
    expected = _kafka_python_batch(inputs)
    assert _strom_batch(inputs, partition_leader_epoch=0) == expected
    [(_, records)] = decode_batches(expected)
    assert records == _as_records(inputs)


@settings(max_examples=60, deadline=None)
@given(INPUTS, st.sampled_from(list(Compression)))
def test_compressed_round_trip_with_kafka_python_property(inputs: list[Input], codec: int) -> None:
    assert _kafka_python_decode(_strom_batch(inputs, codec)) == _as_records(inputs)
    [(_, records)] = decode_batches(_kafka_python_batch(inputs, codec))
    assert records == _as_records(inputs)


# ------------------------------------------------------------------------------ kio

_KIO_SECONDS = 1_700_000_000  # kio's reader keeps whole seconds only: use whole-second times


def _kio_timestamp(seconds: int) -> TZAwareMicros:
    return TZAwareMicros.parse(datetime.datetime.fromtimestamp(seconds, datetime.UTC))


def test_kio_written_batch_decodes() -> None:
    records = tuple(
        KioRecord(
            attributes=i8(0),
            timestamp=_kio_timestamp(_KIO_SECONDS + i),
            offset=i64(i),
            key=None if i == 0 else b"k%d" % i,
            value=b"v" * i,
            headers=(RecordHeader(key=b"h", value=b"x"), RecordHeader(key=b"n", value=None))
            if i == 1
            else (),
        )
        for i in range(4)
    )
    buffer = io.BytesIO()
    write_new_batch(
        buffer,
        NewRecordBatch(
            producer_id=i64(77),
            producer_epoch=i16(1),
            base_sequence=i32(10),
            records=records,
            attributes=i16(0),
        ),
    )
    [(header, decoded)] = decode_batches(buffer.getvalue())
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 1, 10)
    assert decoded == [
        Record(
            i,
            (_KIO_SECONDS + i) * 1000,
            None if i == 0 else b"k%d" % i,
            b"v" * i,
            [("h", b"x"), ("n", None)] if i == 1 else [],
        )
        for i in range(4)
    ]


def test_strom_batch_reads_with_kio() -> None:
    builder = BatchBuilder(producer_id=5, producer_epoch=0, base_sequence=0)
    builder.append(_KIO_SECONDS * 1000, b"a", b"1", [("hk", b"hv"), ("nil", None)])
    builder.append((_KIO_SECONDS + 2) * 1000, None, None)
    builder.append((_KIO_SECONDS + 1) * 1000, b"c", b"")
    data = builder.build()
    batch, size = read_batch(data, 0)  # verifies the CRC and every length
    assert size == len(data)
    assert batch.max_timestamp == (_KIO_SECONDS + 2) * 1000
    assert [(r.offset, int(r.timestamp.timestamp()), r.key, r.value) for r in batch.records] == [
        (0, _KIO_SECONDS, b"a", b"1"),
        (1, _KIO_SECONDS + 2, None, None),
        (2, _KIO_SECONDS + 1, b"c", b""),
    ]
    assert batch.records[0].headers == (
        RecordHeader(key=b"hk", value=b"hv"),
        RecordHeader(key=b"nil", value=None),
    )
