"""Units and identifiers as types (DESIGN.md style rule 4)."""

from __future__ import annotations

import base64
import uuid
from typing import NamedTuple, NewType

Offset = NewType("Offset", int)
LeaderEpoch = NewType("LeaderEpoch", int)
BrokerId = NewType("BrokerId", int)
ProducerId = NewType("ProducerId", int)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

# ListOffsets sentinel timestamps (Kafka's ListOffsetsRequest).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6


class TopicPartition(NamedTuple):
    """A topic name and partition index."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


#: Kafka's ``Uuid.ZERO_UUID``: no topic id (kafka-python decodes it as None).
ZERO_UUID = uuid.UUID(int=0)


def kafka_uuid(value: uuid.UUID) -> str:
    """Kafka's text form of a ``Uuid`` (topic ids in ZooKeeper and ``partition.metadata``):
    URL-safe base64 of the 16 bytes, without padding (22 characters)."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def parse_kafka_uuid(text: str) -> uuid.UUID:
    """The ``Uuid`` :func:`kafka_uuid` wrote; ValueError if ``text`` is not one."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:  # binascii.Error is a ValueError
        raise ValueError(f"not a Kafka uuid: {text!r}") from exc
    return uuid.UUID(bytes=raw)
