"""Driver side: which topic-partitions to read, and their offsets.

Offsets travel between Spark and the source as Spark's Kafka source writes them in its
checkpoint: ``{"topic": {"partition": offset}}`` (partition numbers as strings).
Resolution rules (Spark's): sentinels -2 / -1 become the log start / end offset; a timestamp
becomes the first offset whose timestamp is at or after it, and when there is none the
``startingOffsetsByTimestampStrategy`` decides (``error`` fails, ``latest`` takes the log end).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from strom.client.admin_types import OffsetSpec
from strom.client.sync import SyncAdminClient
from strom.common.errors import UnknownTopicOrPartitionError
from strom.common.types import TopicPartition
from strom.spark.options import (
    EARLIEST,
    LATEST,
    OffsetBound,
    SourceOptions,
    StromSourceOptionError,
    TimestampBound,
)

Offsets = dict[TopicPartition, int]


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{TopicPartition: offset}`` → Spark's checkpoint form, sorted for stable output."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return out


def from_json(data: Mapping[str, Mapping[str, int]]) -> Offsets:
    """Spark's checkpoint form → ``{TopicPartition: offset}``."""
    return {TopicPartition(topic, int(p)): int(offset)
            for topic, partitions in data.items() for p, offset in partitions.items()}


def topic_partitions(admin: SyncAdminClient, options: SourceOptions) -> list[TopicPartition]:
    """The partitions the options select now (subscribe / subscribePattern / assign), sorted.

    A subscribed topic that does not exist contributes no partitions (it is picked up once
    it is created); a pattern is matched against the whole topic name.
    """
    if options.strategy == "assign":
        return sorted(TopicPartition(t, p) for t, p in options.assignment)
    existing = admin.list_topics()
    if options.strategy == "subscribe":
        wanted = set(options.topics)
        names = [t for t in existing if t in wanted]
    else:
        assert options.pattern is not None
        regex = re.compile(options.pattern)
        names = [t for t in existing if regex.fullmatch(t)]
    if not names:
        return []
    out: list[TopicPartition] = []
    for description in admin.describe_topics(names):
        out.extend(TopicPartition(description.name, p.partition)
                   for p in description.partitions)
    return sorted(out)


def log_bounds(admin: SyncAdminClient, tps: Iterable[TopicPartition]) -> tuple[Offsets, Offsets]:
    """(log start offsets, log end offsets) of ``tps``."""
    wanted = list(tps)
    return (_list(admin, wanted, OffsetSpec.EARLIEST), _list(admin, wanted, OffsetSpec.LATEST))


def log_start_offsets(admin: SyncAdminClient, tps: Iterable[TopicPartition]) -> Offsets:
    """The log start offsets of ``tps``."""
    return _list(admin, list(tps), OffsetSpec.EARLIEST)


def _list(admin: SyncAdminClient, tps: list[TopicPartition], spec: int) -> Offsets:
    if not tps:
        return {}
    found = admin.list_offsets(dict.fromkeys(tps, spec))
    missing = [tp for tp in tps if tp not in found]
    if missing:
        raise UnknownTopicOrPartitionError(f"no offsets for {', '.join(map(str, missing))}")
    return {tp: found[tp].offset for tp in tps}


def _check_named(bound: OffsetBound | TimestampBound | None, name: str,
                 known: set[TopicPartition]) -> None:
    if bound is None:
        return
    for topic, partition in bound.specific:
        if TopicPartition(topic, partition) not in known:
            raise StromSourceOptionError(
                f"{name} names {topic}-{partition}, which is not among the partitions read")


def resolve_bound(admin: SyncAdminClient, options: SourceOptions, tps: list[TopicPartition],
                  offsets: OffsetBound, timestamps: TimestampBound | None, name: str,
                  bounds: tuple[Offsets, Offsets] | None = None) -> Offsets:
    """Concrete offsets of ``tps`` for a starting or ending bound (timestamps win)."""
    known = set(tps)
    _check_named(offsets, f"{name}Offsets", known)
    _check_named(timestamps, f"{name}OffsetsByTimestamp", known)
    low, high = bounds if bounds is not None else log_bounds(admin, tps)
    by_time: dict[TopicPartition, int] = {}
    if timestamps is not None:
        specs = {tp: ts for tp in tps
                 if (ts := timestamps.for_partition(tp.topic, tp.partition)) is not None}
        if specs:
            found = admin.list_offsets(specs)
            for tp, ts in specs.items():
                offset = found[tp].offset if tp in found else -1
                if offset < 0:
                    if options.timestamp_strategy != "latest":
                        raise StromSourceOptionError(
                            f"{name}: no record of {tp} has a timestamp at or after {ts}; set "
                            "startingOffsetsByTimestampStrategy=latest to start at the end")
                    offset = high[tp]
                by_time[tp] = offset
    out: Offsets = {}
    for tp in tps:
        if tp in by_time:
            out[tp] = by_time[tp]
            continue
        spec = offsets.for_partition(tp.topic, tp.partition)
        out[tp] = low[tp] if spec == EARLIEST else high[tp] if spec == LATEST else spec
    return out


def resolve_ranges(admin: SyncAdminClient, options: SourceOptions,
                   tps: list[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
    """[start, end) per partition for a batch read, every bound resolved now."""
    if not tps:
        return {}
    bounds = log_bounds(admin, tps)
    starts = resolve_bound(admin, options, tps, options.starting,
                           options.starting_by_timestamp, "starting", bounds)
    ends = resolve_bound(admin, options, tps, options.ending,
                         options.ending_by_timestamp, "ending", bounds)
    out: dict[TopicPartition, tuple[int, int]] = {}
    for tp in tps:
        start, end = starts[tp], ends[tp]
        if end < start:
            raise StromSourceOptionError(
                f"{tp}: ending offset {end} is before the starting offset {start}")
        out[tp] = (start, end)
    return out
