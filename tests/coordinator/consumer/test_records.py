"""KIP-848 consumer-group records of ``__consumer_offsets``: golden bytes written out field by
field from Kafka's JSON schemas (independently of the encoder), bytes produced by Kafka 4.4's own
classes, round trips and malformed input."""

from __future__ import annotations

import uuid

import pytest

from strom.coordinator.codec import RecordFormatError
from strom.coordinator.group.consumer.records import (
    CONSUMER_KEY_TYPES,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerKey,
    ConsumerValue,
    decode_consumer_key,
    decode_consumer_value,
    encode_consumer_key,
    encode_consumer_value,
    topic_partitions,
)
from strom.coordinator.group.records import GroupMetadataKey, OffsetCommitKey, encode_key


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


T1 = uuid.UUID("0123456789abcdef0fedcba987654321")
#: A CurrentMemberAssignment value with AssignmentEpochs, written by Kafka 4.4.0's classes.
KAFKA_CURRENT_WITH_EPOCHS = ("0000000000050000000400020123456789abcdef0fedcba987654321030000000000"
                             "00000101" "00090300000003000000050100")
T2 = uuid.UUID("11111111111111112222222222222222")

# -- golden bytes, written out from the JSON schemas --------------------------------------


def test_metadata_value_golden() -> None:
    # version 0 | epoch int32 | tagged fields: none
    plain = h("0000 00000007 00")
    # ... tagged fields: count 1, tag 0 (MetadataHash), size 8, int64
    hashed = h("0000 00000007 01 00 08 1234567890abcdef")
    assert encode_consumer_value(ConsumerGroupMetadataValue(7)) == plain
    assert encode_consumer_value(ConsumerGroupMetadataValue(7, 0x1234567890ABCDEF)) == hashed
    key = ConsumerGroupMetadataKey("grp")
    assert decode_consumer_value(key, plain) == ConsumerGroupMetadataValue(7)
    assert decode_consumer_value(key, hashed) == ConsumerGroupMetadataValue(7, 0x1234567890ABCDEF)
    negative = ConsumerGroupMetadataValue(-3, -2)
    assert encode_consumer_value(negative) == h("0000 fffffffd 01 00 08 fffffffffffffffe")
    assert decode_consumer_value(key, encode_consumer_value(negative)) == negative


def test_current_member_assignment_value_golden() -> None:
    value = ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=5, previous_member_epoch=4, state=1,
        assigned_partitions=((T1, (0, 1, 2)),), partitions_pending_revocation=((T2, (3,)),))
    golden = h(
        "0000"  # value version 0
        "00000005 00000004 01"  # member epoch, previous member epoch, state int8
        "02"  # assigned partitions: compact array of 1
        "0123456789abcdef0fedcba987654321"  # topic id
        "04 00000000 00000001 00000002 00"  # compact [int32] of 3, struct's tagged fields
        "02 11111111111111112222222222222222 02 00000003 00"  # pending revocation
        "00")  # top-level tagged fields
    assert encode_consumer_value(value) == golden
    key = ConsumerGroupCurrentMemberAssignmentKey("grp", "m-1")
    assert decode_consumer_value(key, golden) == value


def test_member_metadata_value_golden() -> None:
    value = ConsumerGroupMemberMetadataValue(
        instance_id=None, rack_id="r1", client_id="cli", client_host="/10.0.0.1",
        subscribed_topic_names=("a", "bb"), subscribed_topic_regex=None,
        rebalance_timeout_ms=300000, server_assignor="uniform")
    golden = h(
        "0000"  # value version 0
        "00"  # instance id: null
        "03 7231"  # rack id "r1": compact length 2 + 1
        "04 636c69"  # client id "cli"
        "0a 2f31302e302e302e31"  # client host "/10.0.0.1"
        "03 02 61 03 6262"  # subscribed topic names: 2 strings
        "00"  # subscribed regex: null
        "000493e0"  # rebalance timeout 300000
        "08 756e69666f726d"  # server assignor "uniform"
        "00")  # tagged fields
    assert encode_consumer_value(value) == golden
    assert decode_consumer_value(ConsumerGroupMemberMetadataKey("g", "m"), golden) == value


def test_keys_golden() -> None:
    # int16 record type, then a non-flexible body: int16-length strings
    cases: list[tuple[ConsumerKey, str]] = [
        (ConsumerGroupMetadataKey("grp"), "0003 0003 677270"),
        (ConsumerGroupPartitionMetadataKey("grp"), "0004 0003 677270"),
        (ConsumerGroupMemberMetadataKey("grp", "m-1"), "0005 0003 677270 0003 6d2d31"),
        (ConsumerGroupTargetAssignmentMetadataKey("grp"), "0006 0003 677270"),
        (ConsumerGroupTargetAssignmentMemberKey("grp", "m-1"), "0007 0003 677270 0003 6d2d31"),
        (ConsumerGroupCurrentMemberAssignmentKey("grp", "m-1"), "0008 0003 677270 0003 6d2d31"),
        (ConsumerGroupRegularExpressionKey("grp", "foo.*"), "0010 0003 677270 0005 666f6f2e2a"),
    ]
    for key, text in cases:
        assert encode_consumer_key(key) == h(text)
        assert decode_consumer_key(h(text)) == key
    assert {int(text[:4], 16) for _, text in cases} == CONSUMER_KEY_TYPES


# -- bytes produced by Kafka 4.4.0's generated classes -------------------------------------
# From org.apache.kafka.coordinator.group.generated.* (kafka-group-coordinator-4.4.0.jar):
# keys by MessageUtil.toCoordinatorTypePrefixedBytes(key), values by
# MessageUtil.toVersionPrefixedBytes((short) 0, value).
KAFKA_KEYS: dict[str, ConsumerKey] = {
    "00030003677270": ConsumerGroupMetadataKey("grp"),
    "00040003677270": ConsumerGroupPartitionMetadataKey("grp"),
    "0005000367727000036d2d31": ConsumerGroupMemberMetadataKey("grp", "m-1"),
    "00060003677270": ConsumerGroupTargetAssignmentMetadataKey("grp"),
    "0007000367727000036d2d31": ConsumerGroupTargetAssignmentMemberKey("grp", "m-1"),
    "0008000367727000036d2d31": ConsumerGroupCurrentMemberAssignmentKey("grp", "m-1"),
    "001000036772700005666f6f2e2a": ConsumerGroupRegularExpressionKey("grp", "foo.*"),
}
_GROUP = ConsumerGroupMetadataKey("grp")
_MEMBER = ConsumerGroupMemberMetadataKey("grp", "m-1")
_TARGET = ConsumerGroupTargetAssignmentMetadataKey("grp")
_TARGET_MEMBER = ConsumerGroupTargetAssignmentMemberKey("grp", "m-1")
_CURRENT = ConsumerGroupCurrentMemberAssignmentKey("grp", "m-1")
_REGEX = ConsumerGroupRegularExpressionKey("grp", "foo.*")
#: (key, Kafka's value bytes, the value) — the encoder must reproduce these bytes exactly.
KAFKA_VALUES: list[tuple[ConsumerKey, str, ConsumerValue]] = [
    (_GROUP, "00000000000700", ConsumerGroupMetadataValue(7)),
    (_GROUP, "0000000000070100081234567890abcdef",
     ConsumerGroupMetadataValue(7, 0x1234567890ABCDEF)),
    (_MEMBER, "00000003723104636c690a2f31302e302e302e3103026103626200000493e008756e69666f726d00",
     ConsumerGroupMemberMetadataValue(None, "r1", "cli", "/10.0.0.1", ("a", "bb"), None, 300000,
                                      "uniform")),
    (_MEMBER, "000005696e7374000102680106666f6f2e2affffffff0000",
     ConsumerGroupMemberMetadataValue("inst", None, "", "h", (), "foo.*", -1, None)),
    (_TARGET, "00000000000900", ConsumerGroupTargetAssignmentMetadataValue(9)),
    (_TARGET_MEMBER, "0000030123456789abcdef0fedcba98765432103000000000000000200"
     "1111111111111111222222222222222202000000010000",
     ConsumerGroupTargetAssignmentMemberValue(((T1, (0, 2)), (T2, (1,))))),
    (_CURRENT, "0000000000050000000401020123456789abcdef0fedcba98765432104000000000000000100"
     "00000200021111111111111111222222222222222202000000030000",
     ConsumerGroupCurrentMemberAssignmentValue(5, 4, 1, ((T1, (0, 1, 2)),), ((T2, (3,)),))),
    (_REGEX, "00000305666f6f3105666f6f32000000000000002a0000018bcfe5680000",
     ConsumerGroupRegularExpressionValue(("foo1", "foo2"), 42, 1700000000000)),
]
#: Kafka 4.4 values with tagged fields strom does not model: read, the tags are dropped.
KAFKA_TAGGED: list[tuple[ConsumerKey, str, ConsumerValue]] = [
    # ClassicMemberMetadata (tag 0) of a classic-protocol member; regex unset = "" in Kafka.
    (_MEMBER, "00000000026302680202740100001388000100120100000000020672616e6765040102030000",
     ConsumerGroupMemberMetadataValue(None, None, "c", "h", ("t",), "", 5000, None)),
    # AssignmentTimestamp (tag 0, KIP-1263).
    (_TARGET, "0000000000090100080000018bcfe56800", ConsumerGroupTargetAssignmentMetadataValue(9)),
    # AssignmentEpochs (tag 0 of a TopicPartitions, KIP-1251): decoded, and written back
    # byte for byte (test_kafka_assignment_epochs_round_trip).
    (_CURRENT, KAFKA_CURRENT_WITH_EPOCHS,
     ConsumerGroupCurrentMemberAssignmentValue(5, 4, 0, ((T1, (0, 1)),), (), ((T1, (3, 5)),))),
]


def test_kafka_keys() -> None:
    for text, key in KAFKA_KEYS.items():
        assert encode_consumer_key(key) == h(text)
        assert decode_consumer_key(h(text)) == key


@pytest.mark.parametrize(("key", "text", "value"), KAFKA_VALUES)
def test_kafka_values(key: ConsumerKey, text: str, value: ConsumerValue) -> None:
    assert encode_consumer_value(value) == h(text)
    assert decode_consumer_value(key, h(text)) == value


def test_kafka_assignment_epochs_round_trip() -> None:
    value = ConsumerGroupCurrentMemberAssignmentValue(5, 4, 0, ((T1, (0, 1)),), (),
                                                      ((T1, (3, 5)),))
    assert encode_consumer_value(value) == bytes.fromhex(KAFKA_CURRENT_WITH_EPOCHS)


@pytest.mark.parametrize(("key", "text", "value"), KAFKA_TAGGED)
def test_kafka_values_with_unknown_tags(key: ConsumerKey, text: str, value: ConsumerValue) -> None:
    assert decode_consumer_value(key, h(text)) == value


# -- round trips ----------------------------------------------------------------------------
ROUND_TRIPS: list[tuple[ConsumerKey, ConsumerValue]] = [
    (ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(2**31 - 1, -(2**63))),
    (ConsumerGroupPartitionMetadataKey("g"), ConsumerGroupPartitionMetadataValue(b"\x01\x00")),
    (ConsumerGroupMemberMetadataKey("g", "m"),
     ConsumerGroupMemberMetadataValue("i", "rack", "c", "host", tuple(f"t{i}" for i in range(200)),
                                      None, 1, "range")),
    (ConsumerGroupTargetAssignmentMetadataKey("g"), ConsumerGroupTargetAssignmentMetadataValue(0)),
    (ConsumerGroupTargetAssignmentMemberKey("g", "m"),
     ConsumerGroupTargetAssignmentMemberValue(topic_partitions({T2: {5, 1}, T1: set(range(300))}))),
    (ConsumerGroupTargetAssignmentMemberKey("g", "m"),
     ConsumerGroupTargetAssignmentMemberValue(())),
    (ConsumerGroupCurrentMemberAssignmentKey("g", "ü"),
     ConsumerGroupCurrentMemberAssignmentValue(-1, -2, -1, (), ((T1, ()),))),
    (ConsumerGroupRegularExpressionKey("g", "^x$"), ConsumerGroupRegularExpressionValue((), -1, 0)),
]


@pytest.mark.parametrize(("key", "value"), ROUND_TRIPS)
def test_round_trip(key: ConsumerKey, value: ConsumerValue) -> None:
    key_bytes = encode_consumer_key(key)
    assert decode_consumer_key(key_bytes) == key
    assert decode_consumer_value(key, encode_consumer_value(value)) == value
    assert decode_consumer_value(key, None) is None
    assert encode_consumer_value(None) is None


def test_topic_partitions_is_canonical() -> None:
    assert topic_partitions({T2: {3, 1}, T1: {2}}) == ((T1, (2,)), (T2, (1, 3)))
    assert topic_partitions({}) == ()


# -- malformed input and foreign types -------------------------------------------------------
@pytest.mark.parametrize(("key", "value"), ROUND_TRIPS[:1] + ROUND_TRIPS[2:])
def test_truncated_value_raises(key: ConsumerKey, value: ConsumerValue) -> None:
    data = encode_consumer_value(value)
    assert data is not None
    for cut in range(len(data)):
        with pytest.raises(RecordFormatError):
            decode_consumer_value(key, data[:cut])


def test_truncated_key_raises() -> None:
    data = encode_consumer_key(ConsumerGroupCurrentMemberAssignmentKey("grp", "member"))
    for cut in range(len(data)):
        with pytest.raises(RecordFormatError):
            decode_consumer_key(data[:cut])


def test_unknown_value_version_raises() -> None:
    with pytest.raises(RecordFormatError, match="version 1"):
        decode_consumer_value(ConsumerGroupMetadataKey("g"), h("0001 00000007 00"))


def test_bad_metadata_hash_size_raises() -> None:
    with pytest.raises(RecordFormatError):
        decode_consumer_value(ConsumerGroupMetadataKey("g"), h("0000 00000007 01 00 04 00000001"))


def test_unknown_tagged_fields_are_skipped() -> None:
    # two unknown tags (5: 3 bytes, 9: empty) beside MetadataHash
    data = h("0000 00000007 03 05 03 aabbcc 00 08 0000000000000010 09 00")
    assert decode_consumer_value(ConsumerGroupMetadataKey("g"), data) == (
        ConsumerGroupMetadataValue(7, 16))
    data = h("0000 00000009 01 07 02 abcd")
    assert decode_consumer_value(ConsumerGroupTargetAssignmentMetadataKey("g"), data) == (
        ConsumerGroupTargetAssignmentMetadataValue(9))


def test_other_record_types_are_not_ours() -> None:
    for version in (0, 1):
        assert decode_consumer_key(h(f"000{version} 0001 67 0001 74 00000003")) is None
    assert decode_consumer_key(encode_key(OffsetCommitKey("g", "t", 0))) is None
    assert decode_consumer_key(encode_key(GroupMetadataKey("g"))) is None
    for kind in (2, 9, 10, 11, 12, 13, 14, 15, 17, 19, 23):
        assert decode_consumer_key(h(f"{kind:04x} 0001 67")) is None
