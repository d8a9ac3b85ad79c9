"""Compression codecs: round trips, Kafka's stream formats, independent-library cross-decoding,
decompression-bomb limits and error types."""

from __future__ import annotations

import gzip
import json
import os
import struct

import lz4.frame
import pytest
import snappy
import zstandard
from kafka import codec as kafka_codec

from strom.common.errors import CorruptMessageError, UnsupportedCompressionTypeError
from strom.protocol.records.compression import (
    GZIP,
    LZ4,
    LZ4_KAFKA_FRAME_HEADER,
    NONE,
    SNAPPY,
    XERIAL_HEADER,
    ZSTD,
    Compression,
    codec_from_name,
    codec_name,
    compress,
    decompress,
)

XERIAL_CHUNK = 32 * 1024
ALL = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
COMPRESSED = [GZIP, SNAPPY, LZ4, ZSTD]

JSONISH = b"".join(
    json.dumps({"id": i, "name": f"user-{i}", "tags": ["a", "b"]}).encode() for i in range(5000)
)
PAYLOADS = {
    "empty": b"",
    "one": b"x",
    "small": b"hello kafka",
    "json-multi-block": JSONISH,  # > 64 KiB: several lz4 / xerial blocks
    "random": os.urandom(200_000),  # incompressible: lz4 stores blocks uncompressed
    "zeros": bytes(300_000),
}


@pytest.mark.parametrize("codec", ALL)
@pytest.mark.parametrize("name", PAYLOADS)
def test_round_trip(codec: int, name: str) -> None:
    data = PAYLOADS[name]
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", ALL)
def test_accepts_bytearray_and_memoryview(codec: int) -> None:
    data = JSONISH[:100_000]
    packed = compress(codec, bytearray(data))
    assert decompress(codec, compress(codec, memoryview(data))) == data
    assert decompress(codec, memoryview(packed)) == data
    assert decompress(codec, bytearray(packed)) == data


def test_codec_ids_and_names() -> None:
    assert [int(c) for c in Compression] == [0, 1, 2, 3, 4]
    assert codec_from_name("ZSTD") is Compression.ZSTD
    assert codec_from_name("none") is Compression.NONE
    assert codec_name(2) == "snappy"
    with pytest.raises(UnsupportedCompressionTypeError):
        codec_from_name("brotli")


@pytest.mark.parametrize("codec", [5, 6, 7, -1, 99])
def test_unknown_codec(codec: int) -> None:
    with pytest.raises(UnsupportedCompressionTypeError):
        compress(codec, b"x")
    with pytest.raises(UnsupportedCompressionTypeError):
        decompress(codec, b"x")


# ----------------------------------------------------------------------- gzip


def test_gzip_cross() -> None:
    assert gzip.decompress(compress(GZIP, JSONISH)) == JSONISH
    assert decompress(GZIP, gzip.compress(JSONISH, 9)) == JSONISH
    assert decompress(GZIP, kafka_codec.gzip_encode(JSONISH)) == JSONISH
    assert kafka_codec.gzip_decode(compress(GZIP, JSONISH)) == JSONISH


def test_gzip_concatenated_members_and_trailing_garbage() -> None:
    two = gzip.compress(b"abc") + gzip.compress(b"def")
    assert decompress(GZIP, two) == b"abcdef"
    # Java's GZIPInputStream ignores bytes after the last member that are not a gzip header.
    assert decompress(GZIP, gzip.compress(b"abc") + b"\x00junk") == b"abc"


def test_gzip_truncated() -> None:
    packed = gzip.compress(JSONISH)
    with pytest.raises(CorruptMessageError):
        decompress(GZIP, packed[: len(packed) // 2])


# --------------------------------------------------------------------- snappy


def test_snappy_writes_xerial_framing_like_java() -> None:
    packed = compress(SNAPPY, JSONISH)
    assert packed[:16] == XERIAL_HEADER == b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"
    # Same framing as kafka-python's xerial encoder (which mirrors Java's SnappyOutputStream):
    # header, then one [int32 length][raw block] chunk per 32 KiB of input.
    reference = kafka_codec.snappy_encode(JSONISH, xerial_compatible=True)
    assert reference[:16] == packed[:16]
    chunks = -(-len(JSONISH) // XERIAL_CHUNK)
    assert _xerial_chunk_count(packed) == _xerial_chunk_count(reference) == chunks


def _xerial_chunk_count(data: bytes) -> int:
    position, count = 16, 0
    while position < len(data):
        (length,) = struct.unpack_from(">i", data, position)
        position += 4 + length
        count += 1
    assert position == len(data)
    return count


def test_snappy_cross() -> None:
    # kafka-python's xerial framing (Java-compatible) and raw blocks (librdkafka) both decode.
    xerial = kafka_codec.snappy_encode(JSONISH, xerial_compatible=True)
    assert decompress(SNAPPY, xerial) == JSONISH
    assert decompress(SNAPPY, snappy.compress(JSONISH)) == JSONISH
    assert decompress(SNAPPY, kafka_codec.snappy_encode(b"tiny", xerial_compatible=True)) == b"tiny"
    # Our output decodes with kafka-python's xerial decoder and python-snappy block by block.
    packed = compress(SNAPPY, JSONISH)
    assert kafka_codec.snappy_decode(packed) == JSONISH
    position, pieces = 16, []
    while position < len(packed):
        (length,) = struct.unpack_from(">i", packed, position)
        pieces.append(snappy.decompress(packed[position + 4 : position + 4 + length]))
        position += 4 + length
    assert b"".join(pieces) == JSONISH


def test_snappy_xerial_corruptions() -> None:
    packed = compress(SNAPPY, JSONISH)
    for bad in (
        packed[:10],  # truncated header
        packed[:18],  # truncated chunk length
        packed[:100],  # truncated chunk
        packed[:16] + struct.pack(">i", -5) + packed[20:],
    ):
        with pytest.raises(CorruptMessageError):
            decompress(SNAPPY, bad)


def test_snappy_declared_length_lie_is_rejected_without_allocating() -> None:
    # A raw block claiming 200 MB from 6 bytes: impossible for snappy (max ~21x expansion).
    lie = b"\x80\x80\x80\x60" + b"\x00\x00"
    with pytest.raises(CorruptMessageError):
        decompress(SNAPPY, lie)


# ------------------------------------------------------------------------ lz4


def test_lz4_writes_kafka_frame() -> None:
    packed = compress(LZ4, JSONISH)
    # magic, FLG 0x60 (v1, independent blocks, no checksums / size), BD 0x40 (64 KiB), HC:
    # exactly what Kafka's Lz4BlockOutputStream writes; HC checked against python-lz4's.
    assert packed[:7] == LZ4_KAFKA_FRAME_HEADER
    reference = lz4.frame.compress(
        b"x",
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )
    assert reference[:7] == LZ4_KAFKA_FRAME_HEADER
    assert packed.endswith(b"\x00\x00\x00\x00")
    assert lz4.frame.decompress(packed) == JSONISH
    assert kafka_codec.lz4_decode(packed) == JSONISH


def test_lz4_blocks_are_independent() -> None:
    # Java decodes each block on its own; every block must decode without its predecessor.
    import lz4.block

    packed = compress(LZ4, JSONISH)
    position, pieces = 7, []
    while True:
        (size,) = struct.unpack_from("<I", packed, position)
        position += 4
        if size == 0:
            break
        stored = size & 0x7FFFFFFF
        block = packed[position : position + stored]
        if size & 0x80000000:
            pieces.append(block)
        else:
            pieces.append(lz4.block.decompress(block, uncompressed_size=65536))
        position += stored
    assert b"".join(pieces) == JSONISH


@pytest.mark.parametrize(
    "options",
    [
        {},  # python-lz4 defaults: linked blocks (librdkafka-style LZ4F)
        {"block_linked": False, "store_size": True},  # kafka-python's encoder
        {"block_checksum": True, "content_checksum": True},
        {"block_size": lz4.frame.BLOCKSIZE_MAX4MB},
        {"block_size": lz4.frame.BLOCKSIZE_MAX256KB, "compression_level": 9},
    ],
)
def test_lz4_decodes_any_valid_frame(options: dict[str, object]) -> None:
    assert decompress(LZ4, lz4.frame.compress(JSONISH, **options)) == JSONISH


def test_lz4_kafka_python_encoder() -> None:
    assert decompress(LZ4, kafka_codec.lz4_encode(JSONISH)) == JSONISH


def test_lz4_incompressible_blocks_are_stored() -> None:
    data = os.urandom(100_000)
    packed = compress(LZ4, data)
    (first,) = struct.unpack_from("<I", packed, 7)
    assert first & 0x80000000
    assert lz4.frame.decompress(packed) == data


# ----------------------------------------------------------------------- zstd


def test_zstd_cross() -> None:
    packed = compress(ZSTD, JSONISH)
    assert zstandard.ZstdDecompressor().decompress(packed) == JSONISH
    assert kafka_codec.zstd_decode(packed) == JSONISH
    assert decompress(ZSTD, zstandard.ZstdCompressor(level=19).compress(JSONISH)) == JSONISH
    assert decompress(ZSTD, kafka_codec.zstd_encode(JSONISH)) == JSONISH


def test_zstd_without_content_size() -> None:
    # Java's ZstdOutputStream streams: its frames carry no content size.
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(JSONISH)
    assert decompress(ZSTD, no_size) == JSONISH
    streamed = zstandard.ZstdCompressor(write_checksum=True).compressobj()
    frame = streamed.compress(JSONISH[:1000]) + streamed.compress(JSONISH[1000:])
    frame += streamed.flush()
    assert decompress(ZSTD, frame) == JSONISH


def test_zstd_truncated() -> None:
    packed = zstandard.ZstdCompressor(write_content_size=False).compress(JSONISH)
    with pytest.raises(CorruptMessageError):
        decompress(ZSTD, packed[: len(packed) - 10])


# ---------------------------------------------------------------- bombs / limits


def _bombs() -> dict[int, bytes]:
    zeros = bytes(20 * 1024 * 1024)
    return {
        GZIP: gzip.compress(zeros),
        SNAPPY: kafka_codec.snappy_encode(zeros, xerial_compatible=True),
        LZ4: lz4.frame.compress(zeros, store_size=False),
        ZSTD: zstandard.ZstdCompressor(write_content_size=False).compress(zeros),
    }


@pytest.mark.parametrize("codec", COMPRESSED)
def test_max_output_size(codec: int) -> None:
    bomb = _bombs()[codec]
    assert len(bomb) < 2 * 1024 * 1024
    with pytest.raises(CorruptMessageError):
        decompress(codec, bomb, max_output_size=1024 * 1024)
    assert len(decompress(codec, bomb, max_output_size=20 * 1024 * 1024)) == 20 * 1024 * 1024


def test_zstd_declared_content_size_above_limit() -> None:
    packed = zstandard.ZstdCompressor().compress(bytes(5_000_000))
    with pytest.raises(CorruptMessageError):
        decompress(ZSTD, packed, max_output_size=4_999_999)
    assert decompress(ZSTD, packed, max_output_size=5_000_000) == bytes(5_000_000)


# --------------------------------------------------------------- malformed input


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize(
    "data",
    [b"", b"\x01", b"garbage garbage garbage", bytes(64), b"\xff" * 64],
    ids=["empty", "one-byte", "text", "zeros", "ones"],
)
def test_garbage_is_corrupt(codec: int, data: bytes) -> None:
    with pytest.raises(CorruptMessageError):
        decompress(codec, data)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_every_truncation_is_corrupt_or_a_prefix(codec: int) -> None:
    data = JSONISH[:3000]
    packed = compress(codec, data)
    for cut in range(len(packed)):
        try:
            out = decompress(codec, packed[:cut])
        except CorruptMessageError:
            continue
        # A cut may still be a valid stream only if it decodes to a prefix (never garbage).
        assert data.startswith(out), cut
