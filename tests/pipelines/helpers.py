"""Topics, records and queries for the pipeline tests (real broker, real Spark)."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from strom.client.admin_types import ConfigResource, OffsetSpec
from strom.client.records import ConsumerRecord
from strom.client.sync import SyncAdminClient, SyncFetcher, SyncProducer
from strom.common.types import TopicPartition

QUERY_TIMEOUT_S = 120


@dataclass(frozen=True)
class Rec:
    """A record to produce."""

    value: bytes | None
    key: bytes | None = None
    partition: int | None = None
    timestamp: int | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def new_topic(bootstrap: str, prefix: str = "t", partitions: int = 2,
              configs: Mapping[str, str] | None = None, topic: str | None = None) -> str:
    topic = topic or name(prefix)
    with SyncAdminClient(bootstrap) as admin:
        admin.create_topic(topic, partitions, 1, dict(configs or {}))
    return topic


def produce(bootstrap: str, topic: str, records: Iterable[Rec]) -> None:
    with SyncProducer(bootstrap) as producer:
        for r in records:
            producer.send(topic, r.value, r.key, list(r.headers) or None, r.partition,
                          r.timestamp)
        producer.flush()


def produce_values(bootstrap: str, topic: str, values: Iterable[str]) -> None:
    produce(bootstrap, topic, (Rec(v.encode()) for v in values))


def read_topic(bootstrap: str, topic: str) -> list[ConsumerRecord]:
    """Every record of ``topic``, by partition then offset."""
    out: list[ConsumerRecord] = []
    with SyncFetcher(bootstrap, max_wait_ms=50) as fetcher:
        tps = fetcher.assign_topic(topic)
        fetcher.seek_to_beginning()
        ends = fetcher.end_offsets()
        deadline = time.monotonic() + 30
        while any((fetcher.position(tp) or 0) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"could not read {topic} to its end"
            out.extend(fetcher.poll())
    return sorted(out, key=lambda r: (r.partition, r.offset))


def text(data: bytes | None) -> str | None:
    return None if data is None else data.decode()


def latest_by_key(records: Iterable[ConsumerRecord]) -> dict[str | None, str | None]:
    """The table a compacted topic stands for (records in offset order per partition)."""
    return {text(r.key): text(r.value) for r in records}


def words(line: str) -> list[str]:
    """The word-count pipelines' words, computed the Python way."""
    return [w for w in re.split(r"\W+", line.lower()) if w]


def topic_config(bootstrap: str, topic: str, key: str) -> str | None:
    with SyncAdminClient(bootstrap) as admin:
        entries = admin.describe_configs([ConfigResource.topic(topic)], keys=[key])
    return next((e.value for es in entries.values() for e in es if e.name == key), None)


def partition_counts(bootstrap: str, topics: Sequence[str]) -> dict[str, int]:
    with SyncAdminClient(bootstrap) as admin:
        return {d.name: len(d.partitions) for d in admin.describe_topics(topics)}


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    with SyncAdminClient(bootstrap) as admin:
        got = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.LATEST
                                  for p in range(partitions)})
    return {tp.partition: o.offset for tp, o in got.items()}


def finish(query: Any) -> Any:
    """Wait for an AvailableNow query to stop by itself; re-raise its failure."""
    query.awaitTermination(QUERY_TIMEOUT_S)
    assert not query.isActive, "the AvailableNow query did not stop in time"
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return query
