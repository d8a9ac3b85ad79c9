import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.common.errors import InvalidRequestError
from strom.protocol.frame import (
    FrameDecoder,
    FrameTooLargeError,
    encode_response_header,
    parse_request_header,
)


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def test_frames_split_at_any_boundary() -> None:
    stream = frame(b"abc") + frame(b"") + frame(b"x" * 1000)
    for step in (1, 2, 3, 5, 7, 100, len(stream)):
        decoder = FrameDecoder(10_000)
        out = []
        for i in range(0, len(stream), step):
            out += [bytes(f) for f in decoder.feed(stream[i : i + step])]
        assert out == [b"abc", b"", b"x" * 1000]
        assert decoder.pending == 0


def test_frames_are_writable_and_independent() -> None:
    decoder = FrameDecoder(100)
    a, b = decoder.feed(frame(b"aaaa") + frame(b"bbbb"))
    a[0] = ord("z")
    assert bytes(a) == b"zaaa" and bytes(b) == b"bbbb"


@pytest.mark.parametrize("size", [-1, 101, 2**31 - 1])
def test_oversized_frame_rejected_before_buffering(size: int) -> None:
    decoder = FrameDecoder(100)
    with pytest.raises(FrameTooLargeError):
        decoder.feed(struct.pack(">i", size))


def test_buffer_grows_with_the_bytes_that_arrive_not_the_announced_size() -> None:
    announced = 100 * 1024 * 1024
    decoder = FrameDecoder(announced)
    assert decoder.feed(struct.pack(">i", announced) + b"0123456789") == []
    assert decoder.pending == 10 and decoder.in_frame
    assert decoder._buffer.__alloc__() < 100  # not 100 MiB
    payload = bytes(range(256)) * (announced // 256)
    position = 10
    chunk = 256 * 1024
    frames: list[memoryview] = []
    while position < announced:
        frames += decoder.feed(payload[position : position + chunk])
        position += chunk
        if not frames:
            assert decoder._buffer.__alloc__() <= decoder.pending * 9 // 8 + 64
    assert len(frames) == 1 and len(frames[0]) == announced
    assert bytes(frames[0][:10]) == b"0123456789" and bytes(frames[0][10:]) == payload[10:]
    assert decoder.pending == 0 and not decoder.in_frame


def test_request_header_v1_and_v2() -> None:
    # Metadata v9 is flexible: header v2 with an empty tagged section.
    raw = struct.pack(">hhih", 3, 9, 42, 3) + b"cli" + b"\x00" + b"BODY"
    header, pos = parse_request_header(memoryview(raw))
    assert (header.api_key, header.api_version, header.correlation_id) == (3, 9, 42)
    assert header.client_id == "cli" and header.header_version == 2
    assert raw[pos:] == b"BODY"
    raw1 = struct.pack(">hhih", 3, 1, 7, -1) + b"BODY"
    header, pos = parse_request_header(memoryview(raw1))
    assert header.client_id is None and header.header_version == 1 and raw1[pos:] == b"BODY"


def test_unknown_tags_in_header_are_skipped() -> None:
    raw = struct.pack(">hhih", 18, 3, 1, 0) + bytes([2, 5, 1, 0xAA, 9, 2, 1, 2]) + b"B"
    _header, pos = parse_request_header(memoryview(raw))
    assert raw[pos:] == b"B"


def test_response_headers() -> None:
    assert encode_response_header(5, 0) == b"\x00\x00\x00\x05"
    assert encode_response_header(5, 1) == b"\x00\x00\x00\x05\x00"


@given(st.binary(max_size=64))
def test_header_parser_never_crashes(data: bytes) -> None:
    with contextlib.suppress(InvalidRequestError):
        parse_request_header(memoryview(data))


@given(st.lists(st.binary(max_size=50), max_size=20))
def test_decoder_never_crashes(chunks: list[bytes]) -> None:
    decoder = FrameDecoder(1000)
    try:
        for chunk in chunks:
            decoder.feed(chunk)
    except FrameTooLargeError:
        pass
