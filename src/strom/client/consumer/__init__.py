"""The group consumer: :class:`Consumer` and what it is made of (see README.md)."""

from strom.client.consumer.assignors import (
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
)
from strom.client.consumer.consumer import (
    CommitFailedError,
    Consumer,
    NoOffsetForPartitionError,
)
from strom.client.consumer.deserializers import DeserializationError

__all__ = [
    "CommitFailedError",
    "Consumer",
    "CooperativeStickyAssignor",
    "DeserializationError",
    "NoOffsetForPartitionError",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
]
