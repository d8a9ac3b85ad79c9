"""Hypothesis fuzzing: malformed batches and compressed streams raise only the codec's own
errors (CorruptMessageError; UnsupportedCompressionTypeError for codec ids 5-7;
UnsupportedForMessageFormatError for magic 0/1) — never IndexError, struct.error, ValueError,
UnicodeDecodeError, MemoryError or a library's own exception."""

from __future__ import annotations

import contextlib
import os
import struct

import lz4.frame
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec

from strom.common.errors import (
    CorruptMessageError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from strom.protocol.records.batch import crc32c
from strom.protocol.records.builder import BatchBuilder, build_control_batch
from strom.protocol.records.compression import Compression, compress, decompress
from strom.protocol.records.control import ControlType
from strom.protocol.records.reader import decode_batches, iter_offsets_and_timestamps

ALLOWED = (CorruptMessageError, UnsupportedCompressionTypeError, UnsupportedForMessageFormatError)
LIMIT = 1 << 20
#: STROM_FUZZ_EXAMPLES=20000 runs a longer campaign than the default suite.
FUZZ = settings(
    max_examples=int(os.environ.get("STROM_FUZZ_EXAMPLES", "400")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _seed_batch(codec: int, count: int, headers: bool) -> bytes:
    builder = BatchBuilder(compression=codec, base_offset=1000)
    for i in range(count):
        builder.append(
            1_700_000_000_000 + i * 1000 - (i % 3) * 7000,
            None if i % 4 == 0 else b"key-%d" % i,
            None if i % 5 == 0 else b"value-%d-" % i + b"x" * (i * 13 % 200),
            [(f"h{j}", None if j else b"hv") for j in range(i % 3)] if headers else [],
        )
    return builder.build()


SEED_BATCHES = [
    _seed_batch(codec, count, headers)
    for codec in Compression
    for count, headers in ((1, False), (5, True), (40, True))
] + [
    build_control_batch(
        ControlType.COMMIT, producer_id=1, producer_epoch=2, coordinator_epoch=3, timestamp=4
    ),
    _seed_batch(0, 3, True) + _seed_batch(0, 2, False),
]

_PAYLOAD = b"".join(b"record %d of the fuzz seed; " % i for i in range(3000))
SEED_STREAMS = {
    Compression.GZIP: [compress(Compression.GZIP, _PAYLOAD[:3000])],
    Compression.SNAPPY: [
        compress(Compression.SNAPPY, _PAYLOAD),  # xerial, several chunks
        kafka_codec.snappy_encode(_PAYLOAD[:2000], xerial_compatible=False),  # raw block
    ],
    Compression.LZ4: [
        compress(Compression.LZ4, _PAYLOAD),
        lz4.frame.compress(_PAYLOAD[:5000], block_checksum=True, content_checksum=True),
    ],
    Compression.ZSTD: [
        compress(Compression.ZSTD, _PAYLOAD[:4000]),
        zstandard.ZstdCompressor(write_content_size=False, write_checksum=True).compress(_PAYLOAD),
    ],
}


@st.composite
def mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(min_value=1, max_value=6))):
        if not data:
            break
        position = draw(st.integers(min_value=0, max_value=len(data) - 1))
        operation = draw(st.sampled_from(["flip", "set", "cut", "insert", "delete"]))
        if operation == "flip":
            data[position] ^= 1 << draw(st.integers(min_value=0, max_value=7))
        elif operation == "set":
            data[position] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF]))
        elif operation == "cut":
            del data[position:]
        elif operation == "insert":
            data[position:position] = draw(st.binary(min_size=1, max_size=8))
        else:
            del data[position : position + draw(st.integers(min_value=1, max_value=8))]
    return bytes(data)


def _reseal(data: bytes) -> bytes:
    """Make the first batch's length and CRC consistent again so parsing reaches the records."""
    if len(data) < 61:
        return data
    sealed = bytearray(data)
    struct.pack_into(">i", sealed, 8, len(sealed) - 12)
    struct.pack_into(">I", sealed, 17, crc32c(sealed[21:]))
    return bytes(sealed)


def _decode_everything(data: bytes) -> None:
    for verify_crc in (True, False):
        try:
            for _header, records in decode_batches(
                data, verify_crc=verify_crc, max_decompressed_size=LIMIT
            ):
                assert isinstance(records, list)
        except ALLOWED:
            pass
        try:
            for offset, timestamp in iter_offsets_and_timestamps(
                data, verify_crc=verify_crc, max_decompressed_size=LIMIT
            ):
                assert isinstance(offset, int) and isinstance(timestamp, int)
        except ALLOWED:
            pass


@FUZZ
@given(st.binary(max_size=2000))
def test_random_bytes(data: bytes) -> None:
    _decode_everything(data)


@FUZZ
@given(
    body=st.binary(max_size=1500),
    attributes=st.integers(min_value=0, max_value=0x7F),
    count=st.integers(min_value=-3, max_value=60),
)
def test_random_records_behind_a_valid_header(body: bytes, attributes: int, count: int) -> None:
    length, delta = 49 + len(body), max(count - 1, 0)
    header = struct.pack(
        ">qiibIhiqqqhii", 0, length, 0, 2, 0, attributes, delta, 0, 0, -1, -1, -1, count
    )
    _decode_everything(_reseal(header + body))


@FUZZ
@given(mutated(SEED_BATCHES), st.booleans())
def test_mutated_batches(data: bytes, reseal: bool) -> None:
    _decode_everything(_reseal(data) if reseal else data)


@FUZZ
@given(st.sampled_from([c for c in Compression if c]), st.binary(max_size=1000))
def test_decompress_random(codec: int, data: bytes) -> None:
    with contextlib.suppress(CorruptMessageError):
        decompress(codec, data, max_output_size=LIMIT)


@FUZZ
@given(st.data())
def test_decompress_mutated(data: st.DataObject) -> None:
    codec = data.draw(st.sampled_from(list(SEED_STREAMS)))
    stream = data.draw(mutated(SEED_STREAMS[codec]))
    with contextlib.suppress(CorruptMessageError):
        decompress(codec, stream, max_output_size=LIMIT)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-1000, max_value=1000), st.binary(max_size=64))
def test_unknown_codec_ids(codec: int, data: bytes) -> None:
    with contextlib.suppress(CorruptMessageError, UnsupportedCompressionTypeError):
        decompress(codec, data, max_output_size=LIMIT)
