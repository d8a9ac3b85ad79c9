"""Blocking facades: loop thread lifecycle, queued sends, flush and close (fake broker)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from strom.client.records import ConsumerRecord, RecordMetadata
from strom.client.sync import LoopThread, SyncAdminClient, SyncFetcher, SyncProducer
from strom.common.errors import NetworkError, UnknownTopicOrPartitionError
from strom.common.types import TopicPartition
from tests.client.fake_broker import FakeBroker


@pytest.fixture
def fake() -> Iterator[FakeBroker]:
    loop = LoopThread("fake-broker")
    broker = loop.run(FakeBroker().start())
    yield broker
    loop.run(broker.stop())
    loop.stop()


def test_loop_thread_runs_and_stops() -> None:
    async def answer() -> int:
        return 42

    loop = LoopThread()
    assert loop.run(answer()) == 42
    loop.stop()
    assert loop.loop.is_closed()


def test_failed_start_stops_the_thread() -> None:
    with pytest.raises(NetworkError):
        SyncAdminClient("127.0.0.1:1")


def test_sync_producer_queue_flush_and_close(fake: FakeBroker) -> None:
    fake.create("t", 1)
    producer = SyncProducer(fake.bootstrap, max_pending=7, linger_ms=1)
    futures = [producer.send("t", b"%d" % i) for i in range(50)]
    producer.flush(timeout_s=10)
    assert [f.result(0) for f in futures] == [RecordMetadata(0, i) for i in range(50)]
    # Records still queued on close are delivered, not dropped.
    late = [producer.send("t", b"late") for _ in range(5)]
    producer.close()
    assert [f.result(0).offset for f in late] == [50, 51, 52, 53, 54]


def test_close_twice_is_a_no_op(fake: FakeBroker) -> None:
    for facade in (SyncAdminClient(fake.bootstrap), SyncFetcher(fake.bootstrap)):
        facade.close()
        facade.close()  # e.g. ``with`` after an explicit close(): no "Event loop is closed"


def test_sync_producer_reports_errors_through_futures(fake: FakeBroker) -> None:
    fake.create("t", 1)
    with SyncProducer(fake.bootstrap) as producer:
        future = producer.send("t", b"x", partition=3)
        with pytest.raises(UnknownTopicOrPartitionError):
            future.result(10)


def test_sync_fetcher_and_admin(fake: FakeBroker) -> None:
    with SyncAdminClient(fake.bootstrap) as admin:
        admin.create_topic("s", 2)
        assert admin.list_topics() == ["s"]
    with SyncProducer(fake.bootstrap) as producer:
        for i in range(4):
            producer.send("s", b"v%d" % i, partition=i % 2)
    with SyncFetcher(fake.bootstrap, max_wait_ms=10) as fetcher:
        assert fetcher.assign_topic("s") == [TopicPartition("s", 0), TopicPartition("s", 1)]
        fetcher.seek_to_beginning()
        records: list[ConsumerRecord] = []
        while len(records) < 4:
            records += fetcher.poll(timeout_s=5)
        assert sorted(r.value for r in records if r.value) == [b"v0", b"v1", b"v2", b"v3"]
        assert fetcher.end_offsets() == {TopicPartition("s", 0): 2, TopicPartition("s", 1): 2}
        fetcher.seek(TopicPartition("s", 1), 1)
        assert fetcher.position(TopicPartition("s", 1)) == 1
