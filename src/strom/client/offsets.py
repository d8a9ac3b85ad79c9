"""ListOffsets, shared by the admin client and the fetcher: offsets by timestamp or sentinel.

A spec per partition is a timestamp in ms (the first offset whose timestamp is at or after it)
or one of :class:`~strom.client.admin_types.OffsetSpec`'s sentinels (earliest, latest,
max-timestamp, earliest-local, latest-tiered; each needs the ListOffsets version that
introduced it). Requests go to each partition's leader; leadership errors are retried.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any, Literal, overload

from strom.client.admin_types import OffsetAndTimestamp, OffsetSpec
from strom.client.cluster import Cluster
from strom.client.conn import Connection
from strom.common.errors import KafkaError, error_for
from strom.common.types import TopicPartition
from strom.protocol.versions import ApiKey

READ_UNCOMMITTED = 0
READ_COMMITTED = 1

# The ListOffsets version that introduced each sentinel (KIP-734 max timestamp, KIP-405 tiers).
_MIN_VERSION = {OffsetSpec.MAX_TIMESTAMP: 7, OffsetSpec.EARLIEST_LOCAL: 8,
                OffsetSpec.LATEST_TIERED: 9}


@overload
async def list_offsets(
    cluster: Cluster, specs: Mapping[TopicPartition, int], *, isolation_level: int = ...,
    timeout_s: float | None = ..., partial: Literal[False] = ...,
) -> dict[TopicPartition, OffsetAndTimestamp]: ...


@overload
async def list_offsets(
    cluster: Cluster, specs: Mapping[TopicPartition, int], *, isolation_level: int = ...,
    timeout_s: float | None = ..., partial: Literal[True],
) -> dict[TopicPartition, OffsetAndTimestamp | KafkaError]: ...


@overload
async def list_offsets(
    cluster: Cluster, specs: Mapping[TopicPartition, int], *, isolation_level: int = ...,
    timeout_s: float | None = ..., partial: bool,
) -> dict[TopicPartition, OffsetAndTimestamp | KafkaError]: ...


async def list_offsets(
    cluster: Cluster,
    specs: Mapping[TopicPartition, int],
    *,
    isolation_level: int = READ_UNCOMMITTED,
    timeout_s: float | None = None,
    partial: bool = False,
) -> dict[TopicPartition, Any]:
    """The offset for each partition's spec; raises the first non-retriable error (with
    ``partial``, a failed partition's value is its :class:`KafkaError` instead)."""

    async def call(conn: Connection, tps: list[TopicPartition]) -> dict[TopicPartition, Any]:
        minimum = max((_MIN_VERSION.get(specs[tp], 0) for tp in tps), default=0)
        version = conn.version(ApiKey.LIST_OFFSETS, minimum=minimum or None)
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for tp in tps:
            by_topic[tp.topic].append({"partition_index": tp.partition,
                                       "timestamp": specs[tp]})
        fields: dict[str, Any] = {
            "replica_id": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        }
        if version >= 2:
            fields["isolation_level"] = isolation_level
        if version >= 10:
            fields["timeout_ms"] = int(conn.request_timeout_s * 1000)
        response = await conn.request(ApiKey.LIST_OFFSETS, fields, version=version)
        out: dict[TopicPartition, Any] = {}
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition_index)
                if p.error_code:
                    out[tp] = error_for(p.error_code, f"ListOffsets for {tp}")
                else:
                    out[tp] = OffsetAndTimestamp(p.offset, p.timestamp,
                                                 getattr(p, "leader_epoch", -1))
        for tp in tps:
            out.setdefault(tp, error_for(-1, f"ListOffsets response lacks {tp}"))
        return out

    return await cluster.per_leader(specs, call, timeout_s=timeout_s, partial=partial)
