"""Helpers of the producer-pipeline tests: topics and reading records back."""

from __future__ import annotations

import time
import uuid

from strom.client import AdminClient, ConsumerRecord, Fetcher
from strom.common.types import TopicPartition


async def make_topic(bootstrap: str, partitions: int = 1,
                     config: dict[str, str] | None = None) -> str:
    name = f"pp-{uuid.uuid4().hex[:10]}"
    async with AdminClient(bootstrap) as admin:
        await admin.create_topic(name, partitions, 1, config or {})
    return name


async def read_all(bootstrap: str, topic: str, partitions: int = 1) -> list[ConsumerRecord]:
    """Every record of ``topic`` up to its end offsets, in partition then offset order."""
    async with Fetcher(bootstrap, auto_offset_reset="earliest") as fetcher:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        fetcher.assign(tps)
        ends = await fetcher.end_offsets(tps)
        out: list[ConsumerRecord] = []
        deadline = time.monotonic() + 20
        while any((fetcher.position(tp) or 0) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "records missing"
            out += await fetcher.fetch()
        return sorted(out, key=lambda r: (r.partition, r.offset))
