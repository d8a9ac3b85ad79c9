"""Mirror: topics of one strom cluster copied to another (MirrorMaker's use case).

Reads the source topics (``subscribe`` or ``subscribePattern``) with headers and writes each
record to the target cluster with the same key, value and headers, into the same partition
number of the topic ``<prefix><source topic>`` (``prefix=""`` keeps the name; ``"a."``
gives MirrorMaker 2's ``<source alias>.<topic>`` naming).

Target topics: before the query starts, and again before every micro-batch is written,
each source topic the query selects is looked up; a missing target topic is created with
the source's partition count and its topic-level config overrides (``cleanup.policy``,
``retention.ms``, …), and a target with fewer partitions gets more. So topics created on
the source after the start (a pattern picks them up) are created on the target before their
first records are written — whatever the target's ``auto.create.topics.enable``.

Kept as well: each record's timestamp (the ``strom`` writer takes a ``timestamp`` column).
Not kept: offsets (target offsets are the target's own; no offset translation or group
offset sync as in MirrorMaker 2).

Order and delivery: each source partition is read by one task and written in order, and a
micro-batch is fully acknowledged before the next starts, so a target partition keeps the
source partition's order (do not set ``minPartitions`` on the source: it splits a partition
over tasks). At-least-once: a micro-batch replayed after a crash is written again.
Mirroring within one cluster needs a prefix, and a pattern must not match the target names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from strom.client.admin_types import ConfigResource
from strom.client.sync import SyncAdminClient
from strom.common.config import ConfigSource
from strom.common.errors import TopicAlreadyExistsError
from strom.pipelines.common import (
    BOOTSTRAP_OPTION,
    CONTINUOUS,
    FORMAT,
    PipelineError,
    Source,
    Trigger,
    read_stream,
    start,
)


@dataclass(frozen=True, slots=True)
class MirrorTarget:
    """The cluster records are copied to, the prefix of the target topic names, and extra
    ``strom`` writer options."""

    bootstrap: str
    prefix: str = ""
    options: Mapping[str, str] = field(default_factory=dict, hash=False)

    def topic(self, source_topic: str) -> str:
        return self.prefix + source_topic


def source_topics(admin: SyncAdminClient, source: Source) -> dict[str, int]:
    """The existing topics ``source`` selects and their partition counts."""
    existing = admin.list_topics()
    if source.topics:
        names = [t for t in existing if t in source.topics]
    else:
        regex = re.compile(source.pattern or "")
        names = [t for t in existing if regex.fullmatch(t)]
    if not names:
        return {}
    return {d.name: len(d.partitions) for d in admin.describe_topics(names)}


def _overrides(admin: SyncAdminClient, topic: str) -> dict[str, str]:
    """The topic-level config overrides of ``topic`` (not defaults, not secrets)."""
    entries = admin.describe_configs([ConfigResource.topic(topic)])
    return {e.name: e.value for entries_ in entries.values() for e in entries_
            if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG and e.value is not None
            and not e.sensitive}


def sync_topics(source: Source, target: MirrorTarget) -> list[str]:
    """Create or grow the target topics of ``source``'s topics; returns what was done."""
    done: list[str] = []
    with SyncAdminClient(source.bootstrap) as src, SyncAdminClient(target.bootstrap) as dst:
        wanted = source_topics(src, source)
        if not wanted:
            return done
        present = set(dst.list_topics(include_internal=True))
        targets = {t: target.topic(t) for t in wanted}
        have = {d.name: len(d.partitions)
                for d in dst.describe_topics([n for n in targets.values() if n in present])}
        for topic, partitions in sorted(wanted.items()):
            name = targets[topic]
            if name not in have:
                try:
                    dst.create_topic(name, partitions, -1, _overrides(src, topic))
                    done.append(f"created {name} ({partitions} partitions)")
                except TopicAlreadyExistsError:
                    pass  # created meanwhile; checked again before the next micro-batch
            elif have[name] < partitions:
                dst.create_partitions({name: partitions})
                done.append(f"grew {name} to {partitions} partitions")
    return done


def mirrored(records: DataFrame, prefix: str) -> DataFrame:
    """The columns the writer sends: key, value, headers, partition, timestamp and the
    target topic."""
    return records.select("key", "value", "headers", "partition", "timestamp",
                          F.concat(F.lit(prefix), F.col("topic")).alias("topic"))


def mirror(spark: SparkSession, source: Source, target: MirrorTarget, checkpoint: str | Path,
           trigger: Trigger = CONTINUOUS) -> StreamingQuery:
    """Start copying ``source``'s topics to ``target``; returns the query."""
    if source.bootstrap == target.bootstrap and not target.prefix:
        raise PipelineError("mirroring within one cluster needs a target topic prefix")
    sync_topics(source, target)
    options = {BOOTSTRAP_OPTION: target.bootstrap, **target.options}

    def process(batch: DataFrame, batch_id: int) -> None:
        sync_topics(source, target)
        mirrored(batch, target.prefix).write.format(FORMAT).mode("append") \
            .options(**options).save()

    writer = read_stream(spark, source, include_headers=True).writeStream.foreachBatch(process)
    return start(writer, checkpoint, trigger)
