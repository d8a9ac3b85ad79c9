"""decode_batches / scan_batches / the offsets-and-timestamps fast path."""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable

import pytest

from strom.common.errors import (
    CorruptMessageError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from strom.protocol.records.batch import CRC_OFFSET, crc32c, set_log_append_time
from strom.protocol.records.builder import BatchBuilder
from strom.protocol.records.compression import Compression
from strom.protocol.records.reader import (
    batch_offsets_and_timestamps,
    decode_batches,
    decode_records,
    iter_offsets_and_timestamps,
    scan_batches,
)
from strom.protocol.records.record import Record


def _batch(
    base_offset: int = 0, count: int = 3, codec: int = Compression.NONE, value_size: int = 4
) -> bytes:
    builder = BatchBuilder(base_offset=base_offset, compression=codec)
    for i in range(count):
        builder.append(
            1_000 + i * 7 - (5 if i == 1 else 0),
            None if i % 2 else f"key-{i}".encode(),
            bytes([i % 256]) * value_size,
            [("idx", str(i).encode()), ("nil", None)] if i % 3 == 0 else [],
        )
    return builder.build()


def _expected(base_offset: int = 0, count: int = 3, value_size: int = 4) -> list[Record]:
    return [
        Record(
            base_offset + i,
            1_000 + i * 7 - (5 if i == 1 else 0),
            None if i % 2 else f"key-{i}".encode(),
            bytes([i % 256]) * value_size,
            [("idx", str(i).encode()), ("nil", None)] if i % 3 == 0 else [],
        )
        for i in range(count)
    ]


def _fix_crc(data: bytearray, position: int = 0) -> None:
    (length,) = struct.unpack_from(">i", data, position + 8)
    end = position + 12 + length
    struct.pack_into(">I", data, position + CRC_OFFSET, crc32c(data[position + 21 : end]))


@pytest.mark.parametrize("codec", list(Compression))
def test_decode_several_batches(codec: int) -> None:
    data = _batch(0, 3, codec) + _batch(3, 200, codec, value_size=300) + _batch(203, 1, codec)
    decoded = list(decode_batches(data))
    assert [h.base_offset for h, _ in decoded] == [0, 3, 203]
    assert [h.compression for h, _ in decoded] == [codec] * 3
    assert decoded[0][1] == _expected(0, 3)
    assert decoded[1][1] == _expected(3, 200, 300)
    assert decoded[2][1] == _expected(203, 1)
    assert decoded[1][0].position == decoded[0][0].size
    assert sum(h.size for h, _ in decoded) == len(data)


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_buffer_types(kind: type) -> None:
    data = _batch(10, 5)
    [(_, records)] = decode_batches(kind(data))
    assert records == _expected(10, 5)
    assert all(type(r.key) in (bytes, type(None)) and type(r.value) is bytes for r in records)


def test_trailing_partial_batch_stops_cleanly() -> None:
    first, second = _batch(0, 2), _batch(2, 4)
    data = first + second
    for cut in range(len(data)):
        decoded = list(decode_batches(data[:cut]))
        expected_batches = 1 if cut >= len(first) else 0
        assert len(decoded) == expected_batches, cut
        assert list(iter_offsets_and_timestamps(data[:cut])) == (
            [(0, 1_000), (1, 1_002)] if expected_batches else []
        )


def test_crc_mismatch() -> None:
    data = bytearray(_batch())
    data[-2] ^= 0x01  # the last byte of the last record's value
    with pytest.raises(CorruptMessageError, match="CRC"):
        list(decode_batches(data))
    [(_, records)] = decode_batches(data, verify_crc=False)
    assert records[-1].value == b"\x02\x02\x02\x03"


def test_partition_leader_epoch_and_base_offset_are_outside_the_crc() -> None:
    data = bytearray(_batch())
    struct.pack_into(">qii", data, 0, 12345, len(data) - 12, 99)
    [(header, records)] = decode_batches(data)
    assert (header.base_offset, header.partition_leader_epoch) == (12345, 99)
    assert records[0].offset == 12345


def test_log_append_time_overrides_record_timestamps() -> None:
    data = bytearray(_batch(0, 3))
    set_log_append_time(data, 0, len(data), 5_555)
    [(header, records)] = decode_batches(data)
    assert header.is_log_append_time
    assert [r.timestamp for r in records] == [5_555] * 3
    assert list(iter_offsets_and_timestamps(data)) == [(0, 5_555), (1, 5_555), (2, 5_555)]


@pytest.mark.parametrize("codec", list(Compression))
def test_offsets_and_timestamps_fast_path(codec: int) -> None:
    data = _batch(40, 300, codec) + _batch(340, 2, codec)
    full = [(r.offset, r.timestamp) for _, records in decode_batches(data) for r in records]
    assert list(iter_offsets_and_timestamps(data)) == full
    headers = list(scan_batches(data))
    assert batch_offsets_and_timestamps(data, headers[1]) == full[-2:]
    assert decode_records(data, headers[1]) == _expected(340, 2)


def test_large_varints_in_records() -> None:
    builder = BatchBuilder(base_offset=2**40)
    builder.append(1_700_000_000_000, b"k" * 70_000, b"v" * 300, [("h" * 200, b"x" * 5000)])
    builder.append(1_600_000_000_000, None, None, offset_delta=100_000)
    [(header, records)] = decode_batches(builder.build())
    assert records[0] == Record(
        2**40, 1_700_000_000_000, b"k" * 70_000, b"v" * 300, [("h" * 200, b"x" * 5000)]
    )
    assert records[1] == Record(2**40 + 100_000, 1_600_000_000_000, None, None, [])
    assert header.max_timestamp == 1_700_000_000_000


def test_magic_v0_v1_unsupported_and_bad_magic_corrupt() -> None:
    data = bytearray(_batch())
    cases = [
        (0, UnsupportedForMessageFormatError),
        (1, UnsupportedForMessageFormatError),
        (3, CorruptMessageError),
    ]
    for magic, error in cases:
        data[16] = magic
        with pytest.raises(error):
            list(decode_batches(data))


def test_unknown_codec_in_attributes() -> None:
    data = bytearray(_batch())
    data[22] |= 0x07
    _fix_crc(data)
    with pytest.raises(UnsupportedCompressionTypeError):
        list(decode_batches(data))


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda d: struct.pack_into(">i", d, 8, 10), id="length-below-header"),
        pytest.param(lambda d: struct.pack_into(">i", d, 8, -1), id="negative-length"),
        pytest.param(lambda d: struct.pack_into(">i", d, 57, -1), id="negative-count"),
        pytest.param(lambda d: struct.pack_into(">i", d, 57, 4), id="count-too-high"),
        pytest.param(lambda d: struct.pack_into(">i", d, 57, 2), id="count-too-low"),
        pytest.param(lambda d: struct.pack_into(">i", d, 57, 10**9), id="huge-count"),
        pytest.param(lambda d: d.__setitem__(61, 0x7E), id="record-length-too-long"),
        pytest.param(lambda d: d.__setitem__(61, 0x02), id="record-length-too-short"),
    ],
)
def test_structural_corruption(mutate: Callable[[bytearray], None]) -> None:
    data = bytearray(_batch())
    mutate(data)
    if len(data) >= 61:
        with contextlib.suppress(struct.error):
            _fix_crc(data)
    with pytest.raises(CorruptMessageError):
        list(decode_batches(data))
    with pytest.raises(CorruptMessageError):
        list(iter_offsets_and_timestamps(data, verify_crc=True))


def test_bad_header_key_utf8_is_corrupt() -> None:
    builder = BatchBuilder()
    builder.append(0, None, None, [("ab", None)])
    data = bytearray(builder.build())
    position = data.index(b"ab")
    data[position : position + 2] = b"\xff\xfe"
    _fix_crc(data)
    with pytest.raises(CorruptMessageError):
        list(decode_batches(data))


def test_max_decompressed_size_is_enforced() -> None:
    data = _batch(0, 100, Compression.ZSTD, value_size=10_000)
    with pytest.raises(CorruptMessageError):
        list(decode_batches(data, max_decompressed_size=100_000))
    assert len(next(decode_batches(data, max_decompressed_size=2_000_000))[1]) == 100


def test_empty_input() -> None:
    assert list(decode_batches(b"")) == []
    assert list(iter_offsets_and_timestamps(b"")) == []
