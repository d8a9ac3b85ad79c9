"""Bootstrap parsing, metadata and leader lookup (fake broker)."""

from __future__ import annotations

import asyncio

import pytest

from strom.client.cluster import BootstrapError, Cluster, parse_bootstrap
from strom.common.errors import NetworkError, UnknownTopicOrPartitionError
from strom.common.types import TopicPartition
from tests.client.fake_broker import FakeBroker


def test_parse_bootstrap() -> None:
    assert parse_bootstrap("a:1, b:2,") == [("a", 1), ("b", 2)]
    assert parse_bootstrap("[::1]:9092") == [("::1", 9092)]
    assert parse_bootstrap("PLAINTEXT://h:9") == [("h", 9)]


@pytest.mark.parametrize("bad", ["", "host", "host:", ":9092", "h:abc", "h:0", "h:70000"])
def test_parse_bootstrap_rejects(bad: str) -> None:
    with pytest.raises(BootstrapError):
        parse_bootstrap(bad)


def test_metadata_and_leaders() -> None:
    async def test() -> None:
        broker = await FakeBroker().start()
        broker.create("t", 2)
        try:
            # The first bootstrap address is unreachable; the second works.
            cluster = Cluster(f"127.0.0.1:1,{broker.bootstrap}")
            meta = await cluster.start()
            assert meta.cluster_id == "fake" and list(meta.brokers) == [0]
            assert meta.partition_count("t") == 2
            assert await cluster.leader_for(TopicPartition("t", 1)) == 0
            conn = await cluster.leader_connection(TopicPartition("t", 0))
            assert conn.node_id == 0
            with pytest.raises(UnknownTopicOrPartitionError, match="partition 5"):
                await cluster.leader_for(TopicPartition("t", 5))
            with pytest.raises(UnknownTopicOrPartitionError):
                await cluster.topic_partitions("missing", timeout_s=0.3)
            await cluster.close()
        finally:
            await broker.stop()

    asyncio.run(test())


def test_no_bootstrap_reachable() -> None:
    async def test() -> None:
        with pytest.raises(NetworkError, match="no bootstrap server reachable"):
            await Cluster("127.0.0.1:1").start()

    asyncio.run(test())
