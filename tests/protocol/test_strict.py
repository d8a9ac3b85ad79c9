"""The strict schema check: what kafka-python alone would decode leniently is malformed."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.api_message import ApiMessage

from strom.common.errors import InvalidRequestError
from strom.protocol import api, strict
from strom.protocol.versions import HAND_WRITTEN, SUPPORTED, ApiKey


def metadata_v1(name: bytes, announced: int) -> bytes:
    return struct.pack(">ih", 1, announced) + name


def test_a_string_running_past_the_frame_is_malformed() -> None:
    # Found by fuzzing: kafka-python decoded this as the topic "ab" and strom auto-created it.
    body = metadata_v1(b"ab", 32767)
    with pytest.raises(InvalidRequestError, match=r"Topics\[0\]\.Name string of 32767 bytes"):
        api.decode_request(ApiKey.METADATA, 1, memoryview(body))
    assert api.decode_request(ApiKey.METADATA, 1, memoryview(metadata_v1(b"ab", 2))).topics[
        0].name == "ab"


def test_trailing_bytes_are_tolerated_as_in_kafka() -> None:
    body = metadata_v1(b"ab", 2) + b"\x00\x01"
    assert api.decode_request(ApiKey.METADATA, 1, memoryview(body)).topics[0].name == "ab"


@pytest.mark.parametrize(("api_key", "version", "fields", "null_field"), [
    # Each raised an unhandled exception in its handler before.
    (ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": None}, "Topics"),
    (ApiKey.OFFSET_COMMIT, 2, {"group_id": "g", "generation_id_or_member_epoch": 1,
                               "member_id": "m", "retention_time_ms": -1, "topics": None},
     "Topics"),
    (ApiKey.JOIN_GROUP, 5, {"group_id": "g", "session_timeout_ms": 10000,
                            "rebalance_timeout_ms": 10000, "member_id": "",
                            "group_instance_id": None, "protocol_type": "consumer",
                            "protocols": [{"name": "range", "metadata": None}]},
     r"Protocols\[0\]\.Metadata"),
])
def test_a_null_the_schema_forbids_is_malformed(
    api_key: int, version: int, fields: dict[str, object], null_field: str
) -> None:
    body = api.request(api_key, version, fields)  # kafka-python writes the null regardless
    with pytest.raises(InvalidRequestError, match=f"{null_field} is null where the schema"):
        api.decode_request(api_key, version, memoryview(body))


def test_a_null_the_schema_allows_is_accepted() -> None:
    body = struct.pack(">i", -1)  # Metadata v1: null topics means all topics
    assert api.decode_request(ApiKey.METADATA, 1, memoryview(body)).topics is None
    v0 = api.request(ApiKey.METADATA, 0, {"topics": []})
    with pytest.raises(InvalidRequestError, match="Topics is null"):  # nullable from v1 only
        api.decode_request(ApiKey.METADATA, 0, memoryview(struct.pack(">i", -1)))
    assert api.decode_request(ApiKey.METADATA, 0, memoryview(v0)).topics == []


def test_array_counts_and_tagged_fields_must_fit() -> None:
    with pytest.raises(InvalidRequestError, match="array of 1000 elements runs past"):
        strict.check_request(ApiKey.METADATA, 1, struct.pack(">i", 1000) + b"\x00\x00")
    # ApiVersions v3 (flexible): name "a", version "1", then a tagged section whose only
    # (unknown) field announces 9 bytes and carries 2.
    head = b"\x02a\x021"
    strict.check_request(ApiKey.API_VERSIONS, 3, head + b"\x00")
    strict.check_request(ApiKey.API_VERSIONS, 3, head + b"\x01\x05\x02xy")
    with pytest.raises(InvalidRequestError, match="tagged field of 9 bytes runs past"):
        strict.check_request(ApiKey.API_VERSIONS, 3, head + b"\x01\x05\x09xy")
    with pytest.raises(InvalidRequestError, match="truncated"):
        strict.check_request(ApiKey.API_VERSIONS, 3, head)


def test_a_known_tag_must_fill_its_size() -> None:
    # Fetch v12 response partition tags: 1 = current_leader {leader_id, leader_epoch, <tags>}
    # (9 bytes). Declared as 10 bytes with one byte to spare: kafka-python would misparse.
    def response(tag: bytes) -> bytes:
        partition = struct.pack(">ihqqq", 0, 0, 0, 0, 0) + b"\x00" + struct.pack(">i", -1)
        partition += b"\x01" + tag  # empty records, then the tags
        return struct.pack(">ihi", 0, 0, 0) + b"\x02\x02t\x02" + partition + b"\x00\x00"

    leader = struct.pack(">ii", 1, 2) + b"\x00"
    strict.check_response(ApiKey.FETCH, 12, response(b"\x01\x01\x09" + leader))
    with pytest.raises(InvalidRequestError, match="fills 9 of its 10 tagged bytes"):
        strict.check_response(ApiKey.FETCH, 12, response(b"\x01\x01\x0a" + leader + b"\x00"))


def test_responses_with_a_forbidden_null_are_caught() -> None:
    # JoinGroup's protocol name is nullable only from v7; kafka-python encodes None anyway.
    fields = {"error_code": 0, "generation_id": 1, "protocol_name": None, "leader": "",
              "member_id": "m", "members": []}
    strict.check_response(ApiKey.JOIN_GROUP, 7, api.response(ApiKey.JOIN_GROUP, 7, fields))
    with pytest.raises(InvalidRequestError, match="ProtocolName is null"):
        strict.check_response(ApiKey.JOIN_GROUP, 6, api.response(ApiKey.JOIN_GROUP, 6, fields))


@pytest.mark.parametrize("api_key", sorted(SUPPORTED.keys() - HAND_WRITTEN))
def test_every_supported_schema_compiles(api_key: int) -> None:
    low, high = SUPPORTED[api_key]
    for version in range(low, high + 1):
        for kind in ("request", "response"):
            cls: ApiMessage = (api.request_class(api_key) if kind == "request"
                               else api.response_class(api_key))
            empty = cls(version=version)
            body = api.encode(empty, version)
            try:
                (strict.check_request if kind == "request" else strict.check_response)(
                    api_key, version, body)
            except InvalidRequestError as exc:
                # Defaults that are null in a non-nullable field are kafka-python's, not ours.
                assert "is null where the schema forbids it" in str(exc)
