"""``__consumer_offsets`` key / value formats: golden bytes (Kafka's layouts, written out
field by field here, independently of the encoder) and every readable version."""

from __future__ import annotations

from kafka.protocol.consumer import ConsumerProtocolSubscription

from strom.coordinator.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    decode_value,
    encode_key,
    encode_value,
    java_string_hashcode,
    partition_for,
    subscribed_topics,
)


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


def test_offset_commit_key_golden() -> None:
    key = OffsetCommitKey("g", "t", 3)
    golden = h("0001 0001 67 0001 74 00000003")
    assert encode_key(key) == golden
    assert decode_key(golden) == key
    assert decode_key(h("0000 0001 67 0001 74 00000003")) == key  # version 0 reads the same


def test_group_metadata_key_golden() -> None:
    golden = h("0002 0002 6731")
    assert encode_key(GroupMetadataKey("g1")) == golden
    assert decode_key(golden) == GroupMetadataKey("g1")


def test_unknown_key_versions_are_not_ours() -> None:
    assert decode_key(h("0003 0001 67")) is None  # KIP-848 consumer group records


def test_offset_commit_value_v3_golden() -> None:
    value = OffsetCommitValue(offset=42, leader_epoch=7, metadata="m", commit_timestamp=1000)
    golden = h("0003 000000000000002a 00000007 0001 6d 00000000000003e8")
    assert encode_value(value) == golden
    assert decode_offset_commit_value(golden) == value


def test_offset_commit_value_v1_with_expiry_golden() -> None:
    value = OffsetCommitValue(offset=5, metadata="", commit_timestamp=1, expire_timestamp=2)
    golden = h("0001 0000000000000005 0000 0000000000000001 0000000000000002")
    assert encode_value(value) == golden
    assert decode_offset_commit_value(golden) == value


def test_offset_commit_value_old_and_flexible_versions() -> None:
    v0 = h("0000 0000000000000009 0002 6162 0000000000000064")
    assert decode_offset_commit_value(v0) == OffsetCommitValue(9, -1, "ab", 100)
    v2 = h("0002 0000000000000009 0000 0000000000000064")
    assert decode_offset_commit_value(v2) == OffsetCommitValue(9, -1, "", 100)
    # v4: compact string (length + 1) and a tagged-field section (one unknown tag skipped).
    v4 = h("0004 0000000000000009 00000002 03 6162 0000000000000064 01 05 02 ffff")
    assert decode_offset_commit_value(v4) == OffsetCommitValue(9, 2, "ab", 100)


MEMBER_V3 = (
    "0001 6d"  # member_id "m"
    " 0001 69"  # group_instance_id "i"
    " 0001 63"  # client_id "c"
    " 0002 2f68"  # client_host "/h"
    " 00007530"  # rebalance_timeout 30000
    " 00002710"  # session_timeout 10000
    " 00000002 0102"  # subscription
    " 00000001 03"  # assignment
)


def test_group_metadata_value_v3_golden() -> None:
    value = GroupMetadataValue(
        protocol_type="consumer", generation=4, protocol="range", leader="m",
        current_state_timestamp=1000,
        members=(MemberMetadata("m", "i", "c", "/h", 30000, 10000, b"\x01\x02", b"\x03"),),
    )
    golden = h(
        "0003 0008 636f6e73756d6572 00000004 0005 72616e6765 0001 6d 00000000000003e8"
        " 00000001" + MEMBER_V3
    )
    assert encode_value(value) == golden
    assert decode_group_metadata_value(golden) == value


def test_empty_group_metadata_value_has_null_protocol_and_leader() -> None:
    value = GroupMetadataValue("consumer", 5, None, None, 7, ())
    golden = h("0003 0008 636f6e73756d6572 00000005 ffff ffff 0000000000000007 00000000")
    assert encode_value(value) == golden
    assert decode_group_metadata_value(golden) == value


def test_group_metadata_value_old_versions() -> None:
    v0 = h("0000 0008 636f6e73756d6572 00000001 0005 72616e6765 0001 6d 00000001"
           " 0001 6d 0001 63 0002 2f68 00002710 00000000 00000000")
    decoded = decode_group_metadata_value(v0)
    assert decoded.current_state_timestamp == -1
    assert decoded.members == (MemberMetadata("m", None, "c", "/h", 10000, 10000, b"", b""),)
    v2 = h("0002 0008 636f6e73756d6572 00000001 ffff ffff 0000000000000003 00000001"
           " 0001 6d 0001 63 0002 2f68 00007530 00002710 00000000 00000000")
    decoded = decode_group_metadata_value(v2)
    assert decoded.current_state_timestamp == 3
    assert decoded.members[0].rebalance_timeout == 30000
    assert decoded.members[0].session_timeout == 10000


def test_group_metadata_value_v4_flexible() -> None:
    v4 = h("0004 09 636f6e73756d6572 00000002 06 72616e6765 02 6d 0000000000000001"
           " 02"  # one member (compact array length + 1)
           " 02 6d 00 02 63 03 2f68 00007530 00002710 01 01 00"  # null instance, empty bytes
           " 00")
    decoded = decode_group_metadata_value(v4)
    assert decoded.protocol == "range" and decoded.leader == "m"
    assert decoded.members == (MemberMetadata("m", None, "c", "/h", 30000, 10000, b"", b""),)


def test_tombstones_decode_to_none() -> None:
    assert decode_value(GroupMetadataKey("g"), None) is None
    assert encode_value(None) is None


def test_java_string_hashcode_and_partition() -> None:
    assert java_string_hashcode("") == 0
    assert java_string_hashcode("hello") == 99162322
    assert java_string_hashcode("Aa") == java_string_hashcode("BB") == 2112
    assert java_string_hashcode("polygenelubricants") == -(2**31)
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert java_string_hashcode("\U0001f600") == (0xD83D * 31 + 0xDE00)  # UTF-16 pairs


def test_subscribed_topics_from_the_consumer_protocol() -> None:
    for version in (0, 1, 3):
        data = ConsumerProtocolSubscription(version=version, topics=["a", "b"],
                                            user_data=b"x").encode(version=version)
        assert subscribed_topics(bytes(data)) == {"a", "b"}
    assert subscribed_topics(b"\x00") is None
