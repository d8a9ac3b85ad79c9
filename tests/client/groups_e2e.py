"""Shared by the consumer-group end-to-end tests (client and CLI) against a real broker.

They need the broker's group APIs. ``requires_group_apis`` skips them while the broker does
not advertise FindCoordinator (``strom.protocol.versions.SUPPORTED`` is the source of its
ApiVersions answer), and :func:`skip_unless_served` asks the running broker itself, once per
address, so the tests start running as soon as the broker side lands.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError

from strom.client.conn import Connection
from strom.client.sync import SyncAdminClient, SyncProducer
from strom.protocol.versions import SUPPORTED, ApiKey

requires_group_apis = pytest.mark.skipif(
    ApiKey.FIND_COORDINATOR not in SUPPORTED,
    reason="the broker does not advertise FindCoordinator (consumer groups) yet",
)

_served: dict[str, bool] = {}


def bootstrap_of(broker: Any) -> str:
    return str(getattr(broker, "bootstrap", broker))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def skip_unless_served(bootstrap: str) -> None:
    """Skip the test when the broker at ``bootstrap`` does not advertise FindCoordinator."""
    if bootstrap not in _served:
        async def ask() -> bool:
            host, _, port = bootstrap.rpartition(":")
            conn = await Connection(host, int(port)).open()
            try:
                return ApiKey.FIND_COORDINATOR in conn.broker_versions
            finally:
                await conn.close()

        _served[bootstrap] = asyncio.run(ask())
    if not _served[bootstrap]:
        pytest.skip(f"the broker at {bootstrap} does not advertise FindCoordinator")


def make_topic(bootstrap: str, records: dict[int, int]) -> str:
    """A new topic with ``records[p]`` records in partition ``p``."""
    name = unique("grp")
    with SyncAdminClient(bootstrap) as admin:
        admin.create_topic(name, len(records), 1)
    produce(bootstrap, name, records)
    return name


def produce(bootstrap: str, topic: str, records: dict[int, int]) -> None:
    with SyncProducer(bootstrap) as producer:
        for partition, count in records.items():
            for i in range(count):
                producer.send(topic, b"v%d" % i, partition=partition)
        producer.flush()


class GroupMember:
    """A confluent-kafka consumer in group ``group_id`` subscribed to ``topic``."""

    def __init__(self, bootstrap: str, group_id: str, topic: str, *,
                 client_id: str = "e2e-member", reset: str = "earliest") -> None:
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group_id, "client.id": client_id,
            "auto.offset.reset": reset, "enable.auto.commit": False,
            "session.timeout.ms": 10000, "heartbeat.interval.ms": 500,
        })
        self.consumer.subscribe([topic])
        self.closed = False

    def consume(self, count: int, timeout_s: float = 60.0) -> list[tuple[int, int]]:
        """(partition, offset) of the next ``count`` records."""
        got: list[tuple[int, int]] = []
        deadline = time.monotonic() + timeout_s
        while len(got) < count and time.monotonic() < deadline:
            msg = self.consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(error)
            partition, offset = msg.partition(), msg.offset()
            assert partition is not None and offset is not None
            got.append((partition, offset))
        assert len(got) == count, f"consumed {len(got)} of {count} records"
        return got

    def wait_assigned(self, partitions: int, timeout_s: float = 60.0) -> None:
        """Poll until the member owns ``partitions`` partitions."""
        deadline = time.monotonic() + timeout_s
        while len(self.consumer.assignment()) < partitions:
            assert time.monotonic() < deadline, "no assignment"
            self.consumer.poll(0.2)

    def commit(self) -> None:
        self.consumer.commit(asynchronous=False)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
