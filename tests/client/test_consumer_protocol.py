"""The consumer embedded protocol codec, checked against kafka-python's schema classes."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)

from strom.client.consumer_protocol import (
    ConsumerAssignment,
    ConsumerProtocolError,
    ConsumerSubscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from strom.common.types import TopicPartition

TP = TopicPartition


def _oracle_subscription(version: int) -> bytes:
    owned_cls: Any = ConsumerProtocolSubscription.fields["owned_partitions"].data_class
    message = ConsumerProtocolSubscription(
        topics=["orders", "pay"], user_data=b"ud",
        owned_partitions=[owned_cls(topic="orders", partitions=[0, 2])],
        generation_id=7, rack_id="rack-a")
    return bytes(message.encode(version=version))


def _oracle_assignment(version: int, user_data: bytes | None) -> bytes:
    part_cls: Any = ConsumerProtocolAssignment.fields["assigned_partitions"].data_class
    message = ConsumerProtocolAssignment(
        assigned_partitions=[part_cls(topic="orders", partitions=[0, 2]),
                             part_cls(topic="pay", partitions=[1])],
        user_data=user_data)
    return bytes(message.encode(version=version))


SUBSCRIPTION = ConsumerSubscription(("orders", "pay"), b"ud", (TP("orders", 0), TP("orders", 2)),
                                    7, "rack-a")


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_matches_kafka_schema(version: int) -> None:
    golden = _oracle_subscription(version)
    assert encode_subscription(SUBSCRIPTION, version) == golden
    decoded = decode_subscription(golden)
    assert decoded.version == version
    assert decoded.topics == ("orders", "pay") and decoded.user_data == b"ud"
    assert decoded.owned_partitions == (SUBSCRIPTION.owned_partitions if version >= 1 else ())
    assert decoded.generation_id == (7 if version >= 2 else -1)
    assert decoded.rack_id == ("rack-a" if version >= 3 else None)


@pytest.mark.parametrize("version", [0, 3])
@pytest.mark.parametrize("user_data", [None, b"", b"sticky"])
def test_assignment_matches_kafka_schema(version: int, user_data: bytes | None) -> None:
    golden = _oracle_assignment(version, user_data)
    assignment = ConsumerAssignment((TP("orders", 0), TP("orders", 2), TP("pay", 1)), user_data)
    assert encode_assignment(assignment, version) == golden
    decoded = decode_assignment(golden)
    assert decoded.partitions == assignment.partitions
    assert decoded.user_data == user_data and decoded.version == version


def test_newer_versions_and_omitted_trailing_fields_are_tolerated() -> None:
    # A future v4 is read with the v3 layout; extra bytes at the end are ignored.
    future = b"\x00\x04" + _oracle_subscription(3)[2:] + b"\x00\x00\x00\x09"
    assert decode_subscription(future).rack_id == "rack-a"
    # A client that writes v3 but stops after the owned partitions.
    short = b"\x00\x03" + _oracle_subscription(1)[2:]
    decoded = decode_subscription(short)
    assert decoded.owned_partitions and decoded.generation_id == -1 and decoded.rack_id is None


def test_empty_assignment_means_no_partitions() -> None:
    assert decode_assignment(b"").partitions == ()


@pytest.mark.parametrize("data", [b"\x00", b"\x00\x00\x00\x00\x00\x05\x00\x01a",
                                  b"\xff\xff\x00\x00\x00\x00", b"\x00\x00\x7f\xff\xff\xff"])
def test_malformed_bytes_raise_a_protocol_error(data: bytes) -> None:
    with pytest.raises(ConsumerProtocolError):
        decode_subscription(data)
    with pytest.raises(ConsumerProtocolError):
        decode_assignment(data)


def test_unsupported_encode_version() -> None:
    with pytest.raises(ValueError):
        encode_subscription(SUBSCRIPTION, 4)
    with pytest.raises(ValueError):
        encode_assignment(ConsumerAssignment(()), -1)
