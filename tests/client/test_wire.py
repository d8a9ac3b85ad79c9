"""Client-side framing and version negotiation (sans-io)."""

from __future__ import annotations

import struct

import pytest

from strom.client import wire
from strom.common.errors import UnsupportedVersionError
from strom.protocol.frame import parse_request_header
from strom.protocol.versions import ApiKey


def test_request_header_v1_roundtrips_through_broker_parser() -> None:
    head = wire.encode_request_header(ApiKey.METADATA, 8, 42, "me")
    parsed, position = parse_request_header(memoryview(head))
    assert (parsed.api_key, parsed.api_version, parsed.correlation_id) == (3, 8, 42)
    assert parsed.client_id == "me" and parsed.header_version == 1
    assert position == len(head)


def test_request_header_v2_has_tagged_fields_and_plain_client_id() -> None:
    head = wire.encode_request_header(ApiKey.METADATA, 12, 7, "abc")
    assert head == struct.pack(">hhih", 3, 12, 7, 3) + b"abc" + b"\x00"
    parsed, position = parse_request_header(memoryview(head))
    assert parsed.header_version == 2 and position == len(head)


def test_null_client_id() -> None:
    head = wire.encode_request_header(ApiKey.PRODUCE, 3, 1, None)
    assert head.endswith(b"\xff\xff")


def test_frame_size_prefix() -> None:
    pieces = wire.frame(b"HEAD", b"body!")
    assert b"".join(bytes(p) for p in pieces) == struct.pack(">i", 9) + b"HEADbody!"


def test_response_body_header_versions() -> None:
    # Metadata v12 is flexible -> response header v1 (tagged fields after correlation id).
    frame = memoryview(struct.pack(">i", 5) + b"\x00" + b"BODY")
    assert bytes(wire.response_body(frame, ApiKey.METADATA, 12)) == b"BODY"
    frame0 = memoryview(struct.pack(">i", 5) + b"BODY")
    assert bytes(wire.response_body(frame0, ApiKey.METADATA, 8)) == b"BODY"
    # ApiVersions always answers with header v0, even at flexible v3.
    assert bytes(wire.response_body(frame0, ApiKey.API_VERSIONS, 3)) == b"BODY"
    assert wire.read_correlation_id(frame) == 5


def test_negotiate_picks_highest_common_and_skips_disjoint() -> None:
    chosen = wire.negotiate({
        ApiKey.PRODUCE: (3, 13),      # ours stop at 11 (v12: transactions V2)
        ApiKey.FETCH: (4, 8),         # theirs stop at 8
        ApiKey.METADATA: (13, 20),    # no overlap with ours
    })
    assert chosen == {ApiKey.PRODUCE: 11, ApiKey.FETCH: 8}


def test_pick_version_errors() -> None:
    with pytest.raises(UnsupportedVersionError, match="does not support ListOffsets"):
        wire.pick_version({}, ApiKey.LIST_OFFSETS, "b:1")
    with pytest.raises(UnsupportedVersionError, match="v7"):
        wire.pick_version({ApiKey.LIST_OFFSETS: 5}, ApiKey.LIST_OFFSETS, "b:1", minimum=7)
    assert wire.pick_version({ApiKey.LIST_OFFSETS: 8}, ApiKey.LIST_OFFSETS, "b:1", minimum=7) == 8


def test_client_versions_are_within_the_schemas() -> None:
    from strom.protocol import api

    for key, (low, high) in wire.CLIENT_VERSIONS.items():
        cls = api.request_class(key)
        assert cls.min_version <= low <= high <= cls.max_version, key


def test_api_name() -> None:
    assert wire.api_name(ApiKey.CREATE_TOPICS) == "CreateTopics"
    assert wire.api_name(999) == "ApiKey(999)"
