"""BatchBuilder and control batches: header fields, attributes, CRC, size accounting."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch

from strom.common.errors import CorruptMessageError
from strom.protocol.records.batch import HEADER_SIZE, crc32c, iter_batches, parse_header
from strom.protocol.records.builder import (
    BatchBuilder,
    EncodedRecords,
    build_control_batch,
    max_record_size,
)
from strom.protocol.records.compression import Compression
from strom.protocol.records.control import (
    ControlType,
    EndTxnMarker,
    control_type_of,
    decode_end_txn_marker,
    encode_control_key,
)
from strom.protocol.records.reader import decode_batches
from strom.protocol.records.record import encode_record


def _three(builder: BatchBuilder) -> bytes:
    builder.append(1_000, b"a", b"1")
    builder.append(1_010, None, b"2", [("h", b"x")])
    builder.append(995, b"c", None)
    return builder.build()


def test_producer_defaults() -> None:
    data = _three(BatchBuilder())
    [header] = iter_batches(data)  # validates length and CRC
    assert header.base_offset == 0
    assert header.partition_leader_epoch == -1
    assert header.magic == 2
    assert header.attributes == 0
    assert header.last_offset_delta == 2
    assert header.base_timestamp == 1_000
    assert header.max_timestamp == 1_010
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert header.records_count == 3
    assert header.size == len(data)
    assert crc32c(data[21:]) == header.crc


@pytest.mark.parametrize("codec", list(Compression))
def test_attributes_and_producer_state(codec: Compression) -> None:
    builder = BatchBuilder(compression=codec, base_offset=100, partition_leader_epoch=7)
    builder.set_producer_state(
        producer_id=9, producer_epoch=2, base_sequence=40, transactional=True
    )
    [header] = iter_batches(_three(builder))
    assert header.compression == codec
    assert header.is_transactional and not header.is_control
    assert (header.base_offset, header.partition_leader_epoch) == (100, 7)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 2, 40)
    assert header.last_sequence == 42


def test_builder_output_is_stable_and_grows() -> None:
    builder = BatchBuilder()
    builder.append(1, b"k", b"v")
    first = builder.build()
    assert builder.build() == first
    builder.append(2, b"k", b"v")
    assert parse_header(builder.build()).records_count == 2


def test_explicit_offset_deltas_for_rewrites() -> None:
    builder = BatchBuilder(base_offset=500)
    builder.append(10, b"a", b"1", offset_delta=3)
    builder.append(11, b"b", b"2", offset_delta=7)
    with pytest.raises(ValueError):
        builder.append(12, b"c", b"3", offset_delta=7)
    assert builder.append(13, b"d", b"4") == 8
    [(header, records)] = decode_batches(builder.build())
    assert header.last_offset_delta == 8
    assert [r.offset for r in records] == [503, 507, 508]


def test_log_append_time_attribute() -> None:
    builder = BatchBuilder(log_append_time=True)
    builder.append(5, None, b"v")
    [header] = iter_batches(builder.build())
    assert header.is_log_append_time


def test_empty_batch() -> None:
    data = BatchBuilder().build()
    assert len(data) == HEADER_SIZE
    [header] = iter_batches(data)
    assert header.records_count == 0
    assert header.base_timestamp == header.max_timestamp == -1
    assert list(decode_batches(data)) == [(header, [])]


def test_size_accounting() -> None:
    builder = BatchBuilder()
    assert builder.is_empty and builder.size_in_bytes == HEADER_SIZE
    assert builder.has_room_for(b"k" * 1000, b"v" * 1000, limit=10)  # empty: always room
    builder.append(0, b"key", b"value", [("h", b"1")])
    assert builder.size_in_bytes == len(builder.build())
    bound = max_record_size(b"key", b"value", [("h", b"1")])
    assert bound >= builder.size_in_bytes - HEADER_SIZE
    assert builder.has_room_for(b"k", b"v", limit=builder.size_in_bytes + 50)
    assert not builder.has_room_for(b"k", b"v" * 100, limit=builder.size_in_bytes + 50)
    assert builder.records_count == 1


def test_out_of_range_fields() -> None:
    builder = BatchBuilder(producer_epoch=1 << 20)
    builder.append(0, None, None)
    with pytest.raises(ValueError):
        builder.build()
    with pytest.raises(ValueError):
        BatchBuilder().set_producer_state(-1, -1, -1, transactional=True)


@pytest.mark.parametrize("control_type", [ControlType.COMMIT, ControlType.ABORT])
def test_control_batch(control_type: ControlType) -> None:
    data = build_control_batch(
        control_type,
        producer_id=77,
        producer_epoch=3,
        coordinator_epoch=12,
        timestamp=1_700_000_000_000,
        base_offset=40,
    )
    [(header, [record])] = decode_batches(data)
    assert header.is_control and header.is_transactional
    assert header.compression == Compression.NONE
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, -1)
    assert (record.offset, record.timestamp) == (40, 1_700_000_000_000)
    assert record.key == b"\x00\x00\x00" + bytes([int(control_type)])
    assert record.value == b"\x00\x00\x00\x00\x00\x0c"
    marker = decode_end_txn_marker(record.key, record.value)
    assert marker == EndTxnMarker(control_type, 12)
    assert marker.is_commit == (control_type is ControlType.COMMIT)
    # kafka-python's reader sees the same marker.
    batch = DefaultRecordBatch(data)
    assert batch.is_control_batch and batch.is_transactional and batch.validate_crc()
    [kafka_record] = list(batch)
    assert kafka_record.type == int(control_type)


def test_control_record_parsing_errors() -> None:
    assert control_type_of(b"\x00\x00\x00\x05") is ControlType.UNKNOWN
    with pytest.raises(CorruptMessageError):
        control_type_of(b"\x00")
    with pytest.raises(CorruptMessageError):
        decode_end_txn_marker(encode_control_key(ControlType.COMMIT), b"\x00")
    with pytest.raises(CorruptMessageError):
        decode_end_txn_marker(b"\x00\x00\x00\x05", b"\x00" * 6)
    with pytest.raises(ValueError):
        build_control_batch(
            ControlType.UNKNOWN, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=0
        )


@pytest.mark.parametrize("codec", list(Compression))
def test_encoded_records_seal_into_the_builders_batch(codec: Compression) -> None:
    """A records section encoded elsewhere and sealed later is the batch the builder makes
    of the same records, with any codec and producer state (a transactional one too)."""
    section = EncodedRecords(
        b"".join((encode_record(0, 0, b"a", b"1"), encode_record(1, 10, None, b"2",
                                                                  (("h", b"x"),)),
                  encode_record(2, -5, b"c", None))), count=3, base_timestamp=1_000,
        max_timestamp=1_010)
    builder = BatchBuilder(compression=codec)
    builder.set_producer_state(producer_id=9, producer_epoch=2, base_sequence=40,
                               transactional=True)
    sealed = section.seal(compression=codec, producer_id=9, producer_epoch=2, base_sequence=40,
                          transactional=True)
    assert sealed == _three(builder)
    assert section.size_in_bytes == HEADER_SIZE + len(section.records)
    with pytest.raises(ValueError, match="needs a producer id"):
        section.seal(transactional=True)
