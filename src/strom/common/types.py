"""Units and identifiers as types (DESIGN.md style rule 4)."""

from __future__ import annotations

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


class TopicPartition(NamedTuple):
    """A topic name and partition index."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"
