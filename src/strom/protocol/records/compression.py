"""Record-batch compression codecs, in the exact stream formats Kafka clients write and read.

A compressed v2 batch keeps its 61-byte header in clear; everything after it (the records)
is one compressed stream. The codec is attribute bits 0-2:

====  ======  ===========================================================================
id    name    stream format
====  ======  ===========================================================================
0     none    the records as they are
1     gzip    RFC 1952 gzip (Java ``GZIPOutputStream``); concatenated members are accepted
2     snappy  either xerial framing (Java ``SnappyOutputStream``): magic ``\\x82SNAPPY\\x00``,
              int32 version 1, int32 min-compatible version 1, then chunks of
              [int32 length][raw snappy block], each block holding ≤ 32 KiB of input —
              or one raw snappy block (librdkafka). Both are read; xerial is written.
3     lz4     LZ4 frame format (Kafka ≥ 0.10). Written the way Kafka's
              ``Lz4BlockOutputStream`` does: FLG 0x60 (version 1, independent blocks, no
              checksums, no content size), BD 0x40 (64 KiB blocks). Java rejects
              dependent (linked) blocks, so we never write them; we read any valid frame.
4     zstd    standard zstd frame(s); Java's streaming writer omits the content size, so
              decoding never relies on it.
====  ======  ===========================================================================

Codec ids 5-7 raise :class:`UnsupportedCompressionTypeError`.

Decompression guards against bombs: the output is bounded by ``max_output_size`` and the
output buffer is sized from what the stream itself can produce (gzip streams into a bounded
zlib decompressor; snappy declares its length; lz4 / zstd frames are walked block by block
to bound their output) — never by allocating ``max_output_size`` up front. Any malformed
input raises :class:`CorruptMessageError`, never another exception type.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from enum import IntEnum

import cramjam

from strom.common.errors import CorruptMessageError, UnsupportedCompressionTypeError

BytesLike = bytes | bytearray | memoryview


class Compression(IntEnum):
    """Kafka's compression codec ids (record batch attribute bits 0-2)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


NONE = Compression.NONE
GZIP = Compression.GZIP
SNAPPY = Compression.SNAPPY
LZ4 = Compression.LZ4
ZSTD = Compression.ZSTD

#: Default bound on one batch's decompressed size (Kafka itself has none; a 1 MiB gzip batch
#: can otherwise expand to ~1 GiB).
DEFAULT_MAX_DECOMPRESSED_SIZE = 256 * 1024 * 1024

#: Kafka's default levels: gzip = Deflater default (6), zstd = 3. lz4 uses the fast compressor.
GZIP_DEFAULT_LEVEL = 6
ZSTD_DEFAULT_LEVEL = 3

_BY_NAME = {codec.name.lower(): codec for codec in Compression}


def codec_from_name(name: str) -> Compression:
    """The codec for a ``compression.type`` value such as ``"zstd"`` (``"none"`` included)."""
    try:
        return _BY_NAME[name.strip().lower()]
    except KeyError:
        raise UnsupportedCompressionTypeError(f"unknown compression type {name!r}") from None


def codec_name(codec: int) -> str:
    """``"gzip"`` for 1 and so on; raises for unknown ids."""
    return _codec(codec).name.lower()


def _codec(codec: int) -> Compression:
    try:
        return Compression(codec)
    except ValueError:
        raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}") from None


# --------------------------------------------------------------------------------- compress


def compress(codec: int, data: BytesLike, *, level: int | None = None) -> bytes:
    """Compress ``data`` into the stream format Kafka uses for ``codec`` (see module doc)."""
    kind = _codec(codec)
    if kind is Compression.NONE:
        return bytes(data)
    if kind is Compression.GZIP:
        return _gzip_compress(data, GZIP_DEFAULT_LEVEL if level is None else level)
    if kind is Compression.SNAPPY:
        return _xerial_compress(data)
    if kind is Compression.LZ4:
        return _lz4_compress(data, level)
    return bytes(cramjam.zstd.compress(data, level=ZSTD_DEFAULT_LEVEL if level is None else level))


def _gzip_compress(data: BytesLike, level: int) -> bytes:
    # zlib (stdlib) measured ~1.7x faster than cramjam.gzip at level 6; output is standard
    # gzip with a zero mtime, like Java's GZIPOutputStream.
    compressor = zlib.compressobj(level, zlib.DEFLATED, 31)
    return compressor.compress(data) + compressor.flush()


XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024
_INT32 = struct.Struct(">i")


def _xerial_compress(data: BytesLike) -> bytes:
    view = memoryview(data).cast("B")
    parts: list[BytesLike | cramjam.Buffer] = [XERIAL_HEADER]
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE])
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


LZ4_MAGIC = 0x184D2204
#: magic, FLG 0x60, BD 0x40, header checksum (xxh32(FLG BD) >> 8) & 0xFF — as Kafka writes.
LZ4_KAFKA_FRAME_HEADER = b"\x04\x22\x4d\x18\x60\x40\x82"
LZ4_BLOCK_SIZE = 64 * 1024
_LZ4_UNCOMPRESSED = 0x80000000
_UINT32_LE = struct.Struct("<I")


def _lz4_compress(data: BytesLike, level: int | None) -> bytes:
    view = memoryview(data).cast("B")
    parts: list[BytesLike | cramjam.Buffer] = [LZ4_KAFKA_FRAME_HEADER]
    pack = _UINT32_LE.pack
    for start in range(0, len(view), LZ4_BLOCK_SIZE):
        chunk = view[start : start + LZ4_BLOCK_SIZE]
        if level is None:
            block = cramjam.lz4.compress_block(chunk, store_size=False)
        else:
            block = cramjam.lz4.compress_block(
                chunk, store_size=False, mode="high_compression", compression=level
            )
        if len(block) >= len(chunk):  # incompressible: store as is, like Kafka
            parts.append(pack(len(chunk) | _LZ4_UNCOMPRESSED))
            parts.append(chunk)
        else:
            parts.append(pack(len(block)))
            parts.append(block)
    parts.append(b"\x00\x00\x00\x00")  # end mark
    return b"".join(parts)


# ------------------------------------------------------------------------------- decompress


def decompress(
    codec: int, data: BytesLike, *, max_output_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE
) -> bytes:
    """Decompress one batch's record stream.

    Raises CorruptMessageError for malformed input or output larger than
    ``max_output_size``, UnsupportedCompressionTypeError for an unknown codec id.
    """
    kind = _codec(codec)
    if kind is Compression.NONE:
        return bytes(data)
    if kind is Compression.GZIP:
        return _gzip_decompress(data, max_output_size)
    if kind is Compression.SNAPPY:
        return _snappy_decompress(data, max_output_size)
    if kind is Compression.LZ4:
        bound = _lz4_output_bound(data)
        return _decompress_into(cramjam.lz4.decompress_into, "lz4", data, bound, max_output_size)
    bound = _zstd_output_bound(data)
    return _decompress_into(cramjam.zstd.decompress_into, "zstd", data, bound, max_output_size)


def _corrupt(codec: str, detail: str) -> Exception:
    return CorruptMessageError(f"invalid {codec} data: {detail}")


def _too_large(codec: str, limit: int) -> Exception:
    return CorruptMessageError(f"{codec} data decompresses to more than {limit} bytes")


def _decompress_into(
    function: Callable[[BytesLike, bytearray], int],
    codec: str,
    data: BytesLike,
    bound: int,
    limit: int,
) -> bytes:
    """Decompress into a buffer of ``min(bound, limit)`` bytes; ``bound`` is an upper bound
    of the stream's output, so a stream that does not fit is corrupt or too large."""
    capacity = min(bound, limit)
    out = bytearray(capacity)
    try:
        written = function(data, out)
    except Exception as exc:  # cramjam.DecompressionError, or anything else it may raise
        if bound > limit:
            raise CorruptMessageError(
                f"{codec} data is corrupt or decompresses to more than {limit} bytes: {exc}"
            ) from exc
        raise _corrupt(codec, str(exc)) from exc
    if written == capacity:
        return bytes(out)
    return bytes(memoryview(out)[:written])


def _gzip_decompress(data: BytesLike, limit: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    remaining: BytesLike = data
    try:
        while True:
            decompressor = zlib.decompressobj(31)
            # max_length = 0 would mean "unbounded"; limit - total + 1 is always ≥ 1.
            chunk = decompressor.decompress(remaining, limit - total + 1)
            total += len(chunk)
            if total > limit:
                raise _too_large("gzip", limit)
            if not decompressor.eof:
                raise _corrupt("gzip", "truncated stream")
            parts.append(chunk)
            remaining = decompressor.unused_data
            # Like Java's GZIPInputStream: read further members, ignore trailing garbage.
            if len(remaining) < 18 or remaining[:2] != b"\x1f\x8b":
                break
    except zlib.error as exc:
        raise _corrupt("gzip", str(exc)) from exc
    return parts[0] if len(parts) == 1 else b"".join(parts)


#: Snappy expands at most ~21x (a 3-byte copy emits 64 bytes); a larger declared length
#: is a lie, and must not make us allocate it.
_SNAPPY_MAX_RATIO = 32


def _snappy_block_length(block: BytesLike) -> int:
    try:
        length = int(cramjam.snappy.decompress_raw_len(block))
    except Exception as exc:
        raise _corrupt("snappy", str(exc)) from exc
    if length > _SNAPPY_MAX_RATIO * len(block) + 32:
        raise _corrupt("snappy", f"block of {len(block)} bytes declares {length} bytes")
    return length


def _snappy_decompress(data: BytesLike, limit: int) -> bytes:
    view = memoryview(data).cast("B")
    if not view:
        raise _corrupt("snappy", "empty input")
    blocks = _xerial_blocks(view) if view[:8] == XERIAL_MAGIC else [view]
    lengths = [_snappy_block_length(block) for block in blocks]
    total = sum(lengths)
    if total > limit:
        raise _too_large("snappy", limit)
    out = bytearray(total)
    target = memoryview(out)
    position = 0
    try:
        for block, length in zip(blocks, lengths, strict=True):
            written = cramjam.snappy.decompress_raw_into(
                block, target[position : position + length]
            )
            if written != length:
                raise _corrupt("snappy", f"block produced {written} bytes, declared {length}")
            position += length
    except CorruptMessageError:
        raise
    except Exception as exc:
        raise _corrupt("snappy", str(exc)) from exc
    return bytes(out)


def _xerial_blocks(view: memoryview) -> list[memoryview]:
    """The raw snappy blocks of a xerial stream (header already recognised by its magic)."""
    total = len(view)
    if total < len(XERIAL_HEADER):
        raise _corrupt("snappy", "truncated xerial header")
    position = len(XERIAL_HEADER)
    blocks: list[memoryview] = []
    while position < total:
        if total - position < 4:
            raise _corrupt("snappy", "truncated xerial block length")
        (length,) = _INT32.unpack_from(view, position)
        position += 4
        if length < 0 or length > total - position:
            raise _corrupt("snappy", f"xerial block length {length} out of range")
        blocks.append(view[position : position + length])
        position += length
    return blocks


# LZ4 frame: magic u32le, FLG, BD, [content size u64le], [dict id u32le], HC; then blocks of
# [u32le size, high bit = stored uncompressed][data][u32le checksum if FLG bit 4], ended by a
# zero size and an optional u32le content checksum (FLG bit 2). Skippable frames:
# magic 0x184D2A50-5F, u32le size, data.
_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}
#: A compressed LZ4 block expands at most ~255x (each extra match-length byte adds 255).
_LZ4_MAX_RATIO = 256


def _lz4_output_bound(data: BytesLike) -> int:
    """An upper bound of the decompressed size of the LZ4 frames in ``data``."""
    view = memoryview(data).cast("B")
    total = len(view)
    position = 0
    bound = 0
    unpack = _UINT32_LE.unpack_from
    if total == 0:
        raise _corrupt("lz4", "empty input")
    while position < total:
        if total - position < 8:
            raise _corrupt("lz4", "truncated frame header")
        (magic,) = unpack(view, position)
        if magic & 0xFFFFFFF0 == 0x184D2A50:
            (skip,) = unpack(view, position + 4)
            position += 8 + skip
            continue
        if magic != LZ4_MAGIC:
            raise _corrupt("lz4", f"bad frame magic {magic:#010x}")
        flg = view[position + 4]
        bd = view[position + 5]
        block_max = _LZ4_BLOCK_MAX.get((bd >> 4) & 7)
        if flg >> 6 != 1 or block_max is None:
            raise _corrupt("lz4", "unsupported frame descriptor")
        position += 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0) + 1
        block_checksum = 4 if flg & 0x10 else 0
        frame_bound = 0
        while True:
            if total - position < 4:
                raise _corrupt("lz4", "truncated block")
            (size,) = unpack(view, position)
            position += 4
            if size == 0:
                position += 4 if flg & 0x04 else 0
                break
            stored = size & 0x7FFFFFFF
            if stored > block_max:
                raise _corrupt("lz4", f"block of {stored} bytes exceeds {block_max}")
            if size & _LZ4_UNCOMPRESSED:
                frame_bound += stored
            else:
                frame_bound += min(block_max, _LZ4_MAX_RATIO * stored + 64)
            position += stored + block_checksum
        bound += frame_bound
    if position > total:
        raise _corrupt("lz4", "truncated frame")
    return bound


# zstd frame: magic 0xFD2FB528 (u32le), Frame_Header_Descriptor (FCS flag bits 7-6, single
# segment bit 5, checksum bit 2, dict id flag bits 1-0), [window descriptor], [dict id],
# [frame content size]; blocks of a 3-byte little-endian header (bit 0 last, bits 1-2 type:
# raw / RLE / compressed / reserved, bits 3-23 size) each producing at most
# min(window, 128 KiB); then a u32 checksum if flagged. Skippable frames as in LZ4.
_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_BLOCK_MAX = 128 * 1024
_ZSTD_DICT_ID_SIZE = (0, 1, 2, 4)
_ZSTD_FCS_SIZE = (0, 2, 4, 8)


def _zstd_output_bound(data: BytesLike) -> int:
    """An upper bound of the decompressed size of the zstd frames in ``data``."""
    view = memoryview(data).cast("B")
    total = len(view)
    position = 0
    bound = 0
    unpack = _UINT32_LE.unpack_from
    if total == 0:
        raise _corrupt("zstd", "empty input")
    while position < total:
        if total - position < 8:
            raise _corrupt("zstd", "truncated frame header")
        (magic,) = unpack(view, position)
        if magic & 0xFFFFFFF0 == 0x184D2A50:
            (skip,) = unpack(view, position + 4)
            position += 8 + skip
            continue
        if magic != _ZSTD_MAGIC:
            raise _corrupt("zstd", f"bad frame magic {magic:#010x}")
        descriptor = view[position + 4]
        position += 5
        single_segment = descriptor & 0x20
        block_max = _ZSTD_BLOCK_MAX
        if not single_segment:
            window = view[position]
            position += 1
            base = 1 << (10 + (window >> 3))
            block_max = min(block_max, base + (base >> 3) * (window & 7))
        position += _ZSTD_DICT_ID_SIZE[descriptor & 3]
        fcs_size = _ZSTD_FCS_SIZE[descriptor >> 6] or (1 if single_segment else 0)
        content_size: int | None = None
        if fcs_size:
            if total - position < fcs_size:
                raise _corrupt("zstd", "truncated frame header")
            content_size = int.from_bytes(view[position : position + fcs_size], "little")
            if fcs_size == 2:
                content_size += 256
            position += fcs_size
            if single_segment:
                block_max = min(block_max, content_size)
        frame_bound = 0
        while True:
            if total - position < 3:
                raise _corrupt("zstd", "truncated block header")
            header = view[position] | view[position + 1] << 8 | view[position + 2] << 16
            position += 3
            block_type = (header >> 1) & 3
            size = header >> 3
            if size > _ZSTD_BLOCK_MAX:
                raise _corrupt("zstd", f"block of {size} bytes exceeds {_ZSTD_BLOCK_MAX}")
            if block_type == 0:  # raw
                frame_bound += size
                position += size
            elif block_type == 1:  # RLE: one byte repeated `size` times
                frame_bound += size
                position += 1
            elif block_type == 2:  # compressed
                frame_bound += block_max
                position += size
            else:
                raise _corrupt("zstd", "reserved block type")
            if header & 1:
                break
        position += 4 if descriptor & 0x04 else 0
        bound += frame_bound if content_size is None else min(frame_bound, content_size)
    if position > total:
        raise _corrupt("zstd", "truncated frame")
    return bound
