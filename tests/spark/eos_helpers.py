"""Helpers of the exactly-once sink tests: topics, input records, and a read_committed
reader that returns every visible record of a topic up to its last stable offset."""

from __future__ import annotations

import time
import uuid

from strom.client.sync import SyncAdminClient, SyncFetcher, SyncProducer
from strom.common.types import TopicPartition


def new_topic(bootstrap: str, partitions: int = 2, prefix: str = "eos",
              replication_factor: int = 1) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with SyncAdminClient(bootstrap) as admin:
        admin.create_topic(name, partitions, replication_factor)
    return name


def produce_keyed(bootstrap: str, topic: str, count: int, keys: int,
                  start: int = 0) -> list[tuple[str, str]]:
    """Records ``start`` … ``start + count - 1``: record i has key ``k<i % keys>`` and value
    ``<key>:<i // keys>`` (its sequence within the key; keyed, so each key stays in one
    partition); returns them in send order."""
    sent: list[tuple[str, str]] = []
    with SyncProducer(bootstrap, linger_ms=5) as producer:
        for i in range(start, start + count):
            key = f"k{i % keys}"
            value = f"{key}:{i // keys}"
            producer.send(topic, value.encode(), key.encode())
            sent.append((key, value))
        producer.flush()
    return sent


def read_committed(bootstrap: str, topic: str, partitions: int = 2,
                   timeout_s: float = 30.0) -> dict[int, list[tuple[str | None, str]]]:
    """Every (key, value) a read_committed fetcher returns, per partition in offset order,
    up to the end offsets (the last stable offsets) at the time of the call."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with SyncFetcher(bootstrap, isolation_level="read_committed",
                     auto_offset_reset="earliest") as fetcher:
        fetcher.assign(tps)
        fetcher.seek_to_beginning(tps)
        ends = fetcher.end_offsets(tps)
        out: dict[int, list[tuple[str | None, str]]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout_s
        while any((fetcher.position(tp) or 0) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "records missing below the end offsets"
            for r in fetcher.poll(1.0):
                if r.offset < ends[TopicPartition(r.topic, r.partition)]:
                    out[r.partition].append(
                        (r.key.decode() if r.key is not None else None, (r.value or b"").decode()))
        return out


def values(read: dict[int, list[tuple[str | None, str]]]) -> list[str]:
    return sorted(v for rows in read.values() for _, v in rows)
