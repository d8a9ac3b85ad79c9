"""Helpers of the transaction tests: topics, transactional producers, reading a topic back
with either isolation level through strom.client's fetcher."""

from __future__ import annotations

import importlib.util
import time
import uuid
from typing import Any

import pytest

from strom.client import AdminClient, Fetcher, Producer
from strom.common.types import TopicPartition

#: Whether the broker under test returns aborted transactions to read_committed fetches (the
#: partition side of transactions, strom.storage.txn_index); until then read_committed stops
#: at the last stable offset but cannot drop aborted data.
BROKER_DROPS_ABORTED = importlib.util.find_spec("strom.storage.txn_index") is not None
needs_aborted_filtering = pytest.mark.skipif(
    not BROKER_DROPS_ABORTED,
    reason="the broker does not yet return aborted transactions in Fetch (branch txnpartition)")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def new_topic(bootstrap: str, partitions: int = 2) -> str:
    name = unique("tx")
    async with AdminClient(bootstrap) as admin:
        await admin.create_topic(name, partitions, 1)
    return name


async def read(bootstrap: str, topic: str, partitions: int = 2,
               isolation: str = "read_uncommitted") -> list[bytes]:
    """Every record a fetcher with ``isolation`` returns, up to the end offsets."""
    async with Fetcher(bootstrap, isolation_level=isolation,
                       auto_offset_reset="earliest") as fetcher:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        fetcher.assign(tps)
        ends = await fetcher.end_offsets(tps)
        out: list[bytes] = []
        deadline = time.monotonic() + 20
        while any((fetcher.position(tp) or 0) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "records missing"
            out += [r.value or b"" for r in await fetcher.fetch()]
        return sorted(out)


async def txn_producer(bootstrap: str, tid: str, **options: Any) -> Producer:
    """A started transactional producer, ``init_transactions()`` done."""
    options = {"linger_ms": 5, **options}
    producer = await Producer(bootstrap, transactional_id=tid, **options).start()
    await producer.init_transactions(30)
    return producer
