"""Driver side: which topic-partitions to read and their resolved [start, end) offsets."""

from __future__ import annotations

import re

from strom.client.admin_types import OffsetSpec
from strom.client.sync import SyncAdminClient
from strom.common.errors import UnknownTopicOrPartitionError
from strom.common.types import TopicPartition
from strom.spark.options import EARLIEST, LATEST, SourceOptions, StromSourceOptionError


def topic_partitions(admin: SyncAdminClient, options: SourceOptions) -> list[TopicPartition]:
    """The partitions the options select (subscribe / subscribePattern / assign), sorted."""
    if options.strategy == "assign":
        return sorted(TopicPartition(t, p) for t, p in options.assignment)
    if options.strategy == "subscribe":
        names = list(options.topics)
    else:
        assert options.pattern is not None
        regex = re.compile(options.pattern)
        names = [t for t in admin.list_topics() if regex.fullmatch(t)]
    if not names:
        return []
    out: list[TopicPartition] = []
    for description in admin.describe_topics(names):
        out.extend(TopicPartition(description.name, p.partition)
                   for p in description.partitions)
    return sorted(out)


def resolve_ranges(admin: SyncAdminClient, options: SourceOptions,
                   tps: list[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
    """[start, end) per partition: earliest / latest sentinels resolved with ListOffsets."""
    if not tps:
        return {}
    earliest = admin.list_offsets(dict.fromkeys(tps, OffsetSpec.EARLIEST))
    latest = admin.list_offsets(dict.fromkeys(tps, OffsetSpec.LATEST))
    known = set(tps)
    for bound, name in ((options.starting, "startingOffsets"), (options.ending, "endingOffsets")):
        for topic, partition in bound.specific:
            if TopicPartition(topic, partition) not in known:
                raise StromSourceOptionError(
                    f"{name} names {topic}-{partition}, which is not among the partitions read")
    out: dict[TopicPartition, tuple[int, int]] = {}
    for tp in tps:
        if tp not in earliest:
            raise UnknownTopicOrPartitionError(f"no offsets for {tp}")
        low, high = earliest[tp].offset, latest[tp].offset
        start = _resolve(options.starting.for_partition(tp.topic, tp.partition), low, high)
        end = _resolve(options.ending.for_partition(tp.topic, tp.partition), low, high)
        if end < start:
            raise StromSourceOptionError(
                f"{tp}: ending offset {end} is before the starting offset {start}")
        out[tp] = (start, end)
    return out


def _resolve(spec: int, low: int, high: int) -> int:
    if spec == EARLIEST:
        return low
    if spec == LATEST:
        return high
    return spec
