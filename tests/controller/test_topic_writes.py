"""TopicWriteQueue: many requests, few metadata writes, the same answers as one at a time."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from strom.common.config import BrokerConfig
from strom.common.errors import (
    ErrorCode,
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaError,
    KafkaStorageError,
    PolicyViolationError,
    StromError,
    TopicAlreadyExistsError,
)
from strom.controller.topic_writes import (
    MAX_BATCH_BYTES,
    Creations,
    NewPartitions,
    NewTopic,
    TopicWriteQueue,
    plan_batch,
    write_bytes,
)
from strom.controller.topics import TopicAdmin
from strom.metadata.changes import MetadataChange, PutTopic
from strom.metadata.image import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
from strom.metadata.local import LocalMetadataStore
from strom.metadata.store import StaleMetadataError
from strom.testing.metadata import MemoryMetadataStore


class CountingStore(MemoryMetadataStore):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, expected_epoch: int, changes: Sequence[MetadataChange]) -> MetadataImage:
        self.writes += 1
        return super().write(expected_epoch, changes)


class Logs:
    """The broker's PartitionStorage, in memory; ``fail`` names a topic that cannot get logs."""

    def __init__(self) -> None:
        self.held: set[tuple[str, int]] = set()
        self.fail: str | None = None
        self.syncs = 0

    def prepare_partitions(self, topic: TopicInfo, partitions: Sequence[PartitionInfo], *,
                           sync: bool = True) -> list[tuple[str, int]]:
        if topic.name == self.fail:
            raise KafkaStorageError(f"cannot create the log of partition {topic.name}-0")
        created = [(topic.name, p.partition) for p in partitions]
        self.held.update(created)
        return created

    def sync_prepared(self) -> None:
        self.syncs += 1

    async def prepare_new(self, topics: Sequence[tuple[TopicInfo, Sequence[PartitionInfo]]]
                          ) -> list[list[tuple[str, int]] | KafkaError]:
        outcomes: list[list[tuple[str, int]] | KafkaError] = []
        for topic, partitions in topics:
            try:
                outcomes.append(self.prepare_partitions(topic, partitions, sync=False))
            except KafkaError as exc:
                outcomes.append(exc)
        return outcomes

    async def sync_new(self) -> None:
        self.sync_prepared()

    def discard_partitions(self, prepared: list[tuple[str, int]]) -> None:
        self.held.difference_update(prepared)


def setup(**config: object) -> tuple[CountingStore, TopicAdmin, Logs, TopicWriteQueue]:
    store = CountingStore()
    store.register_broker(BrokerInfo(0, "h", 9092))
    admin = TopicAdmin(store, BrokerConfig(config), rng=random.Random(1))
    logs = Logs()
    return store, admin, logs, TopicWriteQueue(admin, store, logs)


def test_concurrent_requests_share_writes_and_get_their_own_answers() -> None:
    store, _admin, logs, queue = setup()

    async def burst() -> list[list[object]]:
        try:
            return await asyncio.gather(*(queue.create_topics([NewTopic(f"t{i}", 2)])
                                          for i in range(200)))
        finally:
            await queue.close()

    answers = asyncio.run(burst())
    assert all(isinstance(a[0], TopicInfo) and a[0].name == f"t{i}"
               for i, a in enumerate(answers))
    assert set(store.image.topics) == {f"t{i}" for i in range(200)}
    assert store.writes <= 3  # the first request alone, then the rest together
    assert logs.held == {(f"t{i}", p) for i in range(200) for p in range(2)}
    assert logs.syncs == store.writes  # one directory fsync per write, not per log


def test_a_batch_stays_within_what_one_zookeeper_write_can_carry() -> None:
    """Ten requests of 100 one-partition topics (long names) take several writes, none over
    MAX_BATCH_BYTES; a request over it alone is still written whole."""
    store, _admin, _logs, queue = setup()
    sizes: list[int] = []
    write = store.write

    def measured(expected_epoch: int, changes: Sequence[MetadataChange]) -> MetadataImage:
        sizes.append(sum(write_bytes(c.topic.name, len(c.topic.partitions), new=True)
                         for c in changes if isinstance(c, PutTopic)))
        return write(expected_epoch, changes)

    store.write = measured  # type: ignore[method-assign]
    name = "n" * 200

    async def burst() -> None:
        try:
            await asyncio.gather(*(queue.create_topics(
                [NewTopic(f"{r}-{i}-{name}", 1) for i in range(100)]) for r in range(10)))
            await queue.create_topics([NewTopic(f"big-{i}-{name}", 1) for i in range(800)])
        finally:
            await queue.close()

    asyncio.run(burst())
    assert len(store.image.topics) == 1_800
    assert len(sizes) >= 5 and all(size <= MAX_BATCH_BYTES for size in sizes[:-1])
    assert sizes[-1] > MAX_BATCH_BYTES  # the big request, whole


def test_a_batch_answers_as_if_planned_one_request_at_a_time() -> None:
    store, admin, _logs, queue = setup()
    admin.create_topic("grown", 1)

    async def run() -> list[list[object]]:
        try:
            return await asyncio.gather(
                queue.create_topics([NewTopic("a", 1), NewTopic("x.y", 1)]),
                queue.create_topics([NewTopic("a", 3)]),           # created just before
                queue.create_topics([NewTopic("x_y", 1)]),         # collides with x.y
                queue.add_partitions([NewPartitions("grown", 3)]),
                queue.add_partitions([NewPartitions("grown", 5)]),  # waits for the first
                queue.add_partitions([NewPartitions("grown", 2)]),  # now too few
            )
        finally:
            await queue.close()

    first, again, colliding, grow3, grow5, shrink = asyncio.run(run())
    assert [isinstance(o, TopicInfo) for o in first] == [True, True]
    assert isinstance(again[0], TopicAlreadyExistsError)
    assert isinstance(colliding[0], InvalidTopicError)
    assert isinstance(grow3[0], TopicInfo) and isinstance(grow5[0], TopicInfo)
    assert isinstance(shrink[0], InvalidPartitionsError)
    assert len(store.image.topics["grown"].partitions) == 5
    assert len(store.image.topics["a"].partitions) == 1


def test_a_request_over_the_record_bound_is_refused_whole() -> None:
    store, admin, _logs, _queue = setup()
    planned = plan_batch(admin, store.image, [
        Creations(tuple(NewTopic(f"t{i}", 1) for i in range(5001))),
        Creations((NewTopic("fits", 9999),)),
    ])
    assert all(isinstance(o, PolicyViolationError) for o in planned[0].outcomes)
    assert planned[0].changes == [] and len(planned[0].outcomes) == 5001
    assert isinstance(planned[1].outcomes[0], TopicInfo)


def test_a_topic_whose_logs_cannot_be_created_fails_alone() -> None:
    store, _admin, logs, queue = setup()
    logs.fail = "bad"

    async def run() -> tuple[list[object], list[object]]:
        try:
            return await asyncio.gather(
                queue.create_topics([NewTopic("good", 2), NewTopic("bad", 2)]),
                queue.create_topics([NewTopic("other", 1)]))
        finally:
            await queue.close()

    mixed, other = asyncio.run(run())
    assert isinstance(mixed[0], TopicInfo) and isinstance(mixed[1], KafkaStorageError)
    assert isinstance(other[0], TopicInfo)
    assert set(store.image.topics) == {"good", "other"}
    assert logs.held == {("good", 0), ("good", 1), ("other", 0)}


def test_the_broker_partition_bound_counts_earlier_requests_of_the_batch() -> None:
    store, _admin, _logs, queue = setup(**{"max.broker.partitions": 5})

    async def run() -> list[list[object]]:
        try:
            return await asyncio.gather(*(queue.create_topics([NewTopic(f"t{i}", 2)])
                                          for i in range(4)))
        finally:
            await queue.close()

    outcomes = [a[0] for a in asyncio.run(run())]
    assert [isinstance(o, TopicInfo) for o in outcomes] == [True, True, False, False]
    assert all(isinstance(o, PolicyViolationError) for o in outcomes[2:])
    assert set(store.image.topics) == {"t0", "t1"}


def test_closing_cancels_what_is_queued_and_removes_prepared_logs() -> None:
    store, _admin, logs, queue = setup()

    async def run() -> None:
        waiting = [asyncio.ensure_future(queue.create_topics([NewTopic(f"t{i}", 300)]))
                   for i in range(5)]
        await asyncio.sleep(0)
        await queue.close()
        for w in waiting:
            with pytest.raises((asyncio.CancelledError, KafkaError)):
                await w

    asyncio.run(run())
    named = {(t, p.partition) for t, info in store.image.topics.items()
             for p in info.partitions}
    assert logs.held <= named  # nothing prepared for a write that did not happen remains


def test_a_lost_race_waits_for_the_newer_image_before_planning_again() -> None:
    """On ZooKeeper a write that lost a race learns it before the newer image reaches this
    broker (the epoch znode's watch brings it a moment later): planning again at once
    against the old image would lose every attempt within that moment. Here another
    writer moves the metadata 12 times; each new image arrives 20 ms after the loss."""
    store, admin, _logs, _queue = setup()
    admin.create_topic("existing", 1)
    remote = {"epoch": store.image.epoch, "races": 12}
    loop_box: list[asyncio.AbstractEventLoop] = []

    def deliver() -> None:  # the watch: the newer image is installed here
        admin.create_topic(f"other{remote['races']}", 1)

    def commit(expected_epoch: int, changes: Sequence[MetadataChange]) -> None:
        loop = loop_box[0]
        if remote["races"] > 0 or expected_epoch != remote["epoch"]:
            if remote["races"] > 0 and expected_epoch == remote["epoch"]:
                remote["races"] -= 1
                remote["epoch"] += 1  # another writer won; its image is on its way
                loop.call_soon_threadsafe(loop.call_later, 0.02, deliver)
            raise StaleMetadataError(expected_epoch, remote["epoch"])
        remote["epoch"] += 1
        loop.call_soon_threadsafe(store.write, expected_epoch, list(changes))

    queue = TopicWriteQueue(admin, store, commit=commit)

    async def run() -> list[object]:
        loop_box.append(asyncio.get_running_loop())
        try:
            return await queue.create_topics([NewTopic("wanted", 2)])
        finally:
            await queue.close()

    outcome = asyncio.run(run())
    assert isinstance(outcome[0], TopicInfo), outcome
    assert "wanted" in store.image.topics
    assert remote["races"] == 0


def test_a_write_the_store_refuses_fails_its_batch_without_a_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    """A store's refusal (ZooKeeper's request bound) is no bug: the requests get
    UNKNOWN_SERVER_ERROR with the store's reason, logged as a warning, and the queue goes on."""
    store, _admin, _logs, queue = setup()
    write = store.write

    def refusing(expected_epoch: int, changes: Sequence[MetadataChange]) -> MetadataImage:
        if any(isinstance(c, PutTopic) and c.topic.name == "huge" for c in changes):
            raise StromError("the metadata write is over ZooKeeper's request bound")
        return write(expected_epoch, changes)

    store.write = refusing  # type: ignore[method-assign]

    async def requests() -> tuple[list[object], list[object]]:
        try:
            refused = await queue.create_topics([NewTopic("huge", 1)])
            after = await queue.create_topics([NewTopic("fine", 1)])
            return refused, after
        finally:
            await queue.close()

    refused, after = asyncio.run(requests())
    assert isinstance(refused[0], KafkaError) and "request bound" in str(refused[0])
    assert refused[0].code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert isinstance(after[0], TopicInfo) and "huge" not in store.image.topics
    assert not any(r.exc_info for r in caplog.records)


def test_on_a_file_store_the_write_is_persisted_off_the_loop_and_a_close_keeps_its_logs(
        tmp_path: Path) -> None:
    """The file-backed store's write_async: the requests' answers, the file holding the
    topics, and a close arriving while the bytes are being written (the write is made:
    its partitions keep their logs)."""
    store = LocalMetadataStore(tmp_path, BrokerInfo(0, "h", 9092), "c1")
    admin = TopicAdmin(store, BrokerConfig({}), rng=random.Random(1))
    logs = Logs()
    queue = TopicWriteQueue(admin, store, logs, write=store.write_async)
    started, release = threading.Event(), threading.Event()
    original = store._write_out

    def held(persist: Any) -> None:
        if "held" in persist.image.topics:
            started.set()
            assert release.wait(10)
        original(persist)

    store._write_out = held  # type: ignore[method-assign]

    async def run() -> None:
        answers = await asyncio.gather(*(queue.create_topics([NewTopic(f"t{i}", 2)])
                                         for i in range(50)))
        assert [a[0].name for a in answers] == [f"t{i}" for i in range(50)]  # type: ignore[union-attr]
        waiting = asyncio.ensure_future(queue.create_topics([NewTopic("held", 3)]))
        while not started.is_set():
            await asyncio.sleep(0.001)
        threading.Timer(0.05, release.set).start()
        await queue.close()
        with pytest.raises((asyncio.CancelledError, KafkaError)):
            await waiting

    asyncio.run(run())
    reopened = LocalMetadataStore(tmp_path, BrokerInfo(0, "h", 9092))
    assert set(reopened.image.topics) == {f"t{i}" for i in range(50)} | {"held"}
    assert {("held", p) for p in range(3)} <= logs.held
