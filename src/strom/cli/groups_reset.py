"""Offset-reset planning for ``strom groups reset-offsets`` (pure: no broker access).

The command gathers each partition's committed offset and its earliest / latest offsets (and,
for ``--to-datetime``, the first offset at or after the time), then :func:`plan_reset` turns
them into new offsets the way kafka-consumer-groups.sh does: explicit offsets and shifts are
clamped into ``[earliest, latest]``, a time past the last record means the latest offset, and
a shift needs a committed offset to start from.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from strom.cli.common import UsageError
from strom.common.types import TopicPartition


class ResetKind(enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    OFFSET = "offset"
    DATETIME = "datetime"
    SHIFT = "shift"


@dataclass(frozen=True, slots=True)
class ResetSpec:
    """Where to move offsets: ``value`` is the offset, the shift or the time in ms."""

    kind: ResetKind
    value: int = 0


@dataclass(frozen=True, slots=True)
class PartitionBounds:
    """A partition's log start and end offsets (and the offset for a time, when asked)."""

    earliest: int
    latest: int
    for_time: int | None = None  # -1: no record at or after the time


def parse_topic_spec(text: str) -> tuple[str, list[int] | None]:
    """``TOPIC`` or ``TOPIC:P[,P…]`` (kafka-consumer-groups' syntax) → (topic, partitions)."""
    topic, sep, rest = text.partition(":")
    topic = topic.strip()
    if not topic:
        raise UsageError(f"--topic expects TOPIC or TOPIC:PARTITION[,PARTITION…], got {text!r}")
    if not sep:
        return topic, None
    partitions: list[int] = []
    for item in rest.split(","):
        item = item.strip()
        if not item.isdigit():
            raise UsageError(f"invalid partition {item!r} in --topic {text!r}: expected "
                             "comma-separated partition numbers")
        partitions.append(int(item))
    return topic, sorted(set(partitions))


def plan_reset(
    spec: ResetSpec,
    partitions: Sequence[TopicPartition],
    committed: Mapping[TopicPartition, int],
    bounds: Mapping[TopicPartition, PartitionBounds],
) -> dict[TopicPartition, int]:
    """The new offset of each partition (in the order given)."""
    plan: dict[TopicPartition, int] = {}
    for tp in partitions:
        b = bounds[tp]
        if spec.kind is ResetKind.EARLIEST:
            target = b.earliest
        elif spec.kind is ResetKind.LATEST:
            target = b.latest
        elif spec.kind is ResetKind.OFFSET:
            target = spec.value
        elif spec.kind is ResetKind.DATETIME:
            target = b.latest if b.for_time is None or b.for_time < 0 else b.for_time
        else:
            current = committed.get(tp)
            if current is None:
                raise UsageError(f"cannot shift the offset of {tp}: the group has no committed "
                                 "offset for it (use --to-earliest, --to-latest or --to-offset)")
            target = current + spec.value
        plan[tp] = min(max(target, b.earliest), b.latest)
    return plan
