"""strom.client.Consumer against real brokers: strom, and Tansu (another Kafka-compatible
broker) where it has the API, so the client is not tuned to one broker."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from strom.client import AdminClient, CommitFailedError, Consumer, Producer
from strom.client.admin_types import OffsetAndMetadata
from strom.client.consumer import NoOffsetForPartitionError
from strom.common.types import TopicPartition as TP

FAST_GROUP = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 300,
              "auto_offset_reset": "earliest", "max_wait_ms": 100}


@pytest.fixture(params=["strom", "tansu"])
def bootstrap(request: pytest.FixtureRequest) -> str:
    """The session's strom broker, then Tansu."""
    if request.param == "tansu":
        return str(request.getfixturevalue("tansu_bootstrap"))
    return str(request.getfixturevalue("broker").bootstrap)


def skip_on_tansu(bootstrap: str, request: pytest.FixtureRequest, reason: str) -> None:
    if request.node.callspec.params.get("bootstrap") == "tansu":
        pytest.skip(f"Tansu {reason}")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def new_topic(bootstrap: str, partitions: int = 1, records: int = 0,
                    name: str | None = None) -> str:
    topic = name or unique("ct")
    async with AdminClient(bootstrap) as admin:
        await admin.create_topic(topic, partitions, 1)
    if records:
        await produce(bootstrap, topic, records, partitions)
    return topic


async def produce(bootstrap: str, topic: str, count: int, partitions: int = 1,
                  value: Callable[[int], bytes] = lambda i: f"v{i}".encode()) -> None:
    async with Producer(bootstrap) as producer:
        for i in range(count):
            await producer.send(topic, value(i), partition=i % partitions)
        await producer.flush()


async def poll_until(consumer: Consumer, done: Callable[[list[Any]], bool],
                     timeout_s: float = 30) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while not done(got):
        assert time.monotonic() < deadline, f"only {len(got)} records: {got[-3:]}"
        got.extend(await consumer.poll(0.5))
    return got


def run(coro: Awaitable[None], timeout_s: float = 90) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout_s))  # type: ignore[arg-type]


def test_commit_styles_sync_async_explicit_and_committed(
        bootstrap: str, request: pytest.FixtureRequest) -> None:
    skip_on_tansu(bootstrap, request, "returns no committed metadata (OffsetFetch answers "
                  "null for 'half-way')")

    async def test() -> None:
        topic = await new_topic(bootstrap, 2, 10)
        group = unique("g")
        async with Consumer(bootstrap, group_id=group, enable_auto_commit=False,
                            **FAST_GROUP) as consumer:
            consumer.subscribe([topic])
            records = await poll_until(consumer, lambda got: len(got) >= 10)
            # Synchronous commit of the positions: the next offset of each partition.
            committed = await consumer.commit()
            assert {tp: o.offset for tp, o in committed.items()} == {TP(topic, 0): 5,
                                                                      TP(topic, 1): 5}
            assert all(o.leader_epoch == records[-1].leader_epoch for o in committed.values())
            # Explicit offsets with metadata.
            await consumer.commit({TP(topic, 0): OffsetAndMetadata(3, "half-way", -1)})
            answer = await consumer.committed([TP(topic, 0), TP(topic, 1)])
            assert answer[TP(topic, 0)] is not None and answer[TP(topic, 0)].offset == 3
            assert answer[TP(topic, 0)].metadata == "half-way"
            assert answer[TP(topic, 1)] is not None and answer[TP(topic, 1)].offset == 5
            # Asynchronous commit with a callback.
            seen: list[tuple[dict[TP, OffsetAndMetadata], BaseException | None]] = []
            await consumer.commit_async({TP(topic, 1): 4},
                                        lambda offsets, error: seen.append((offsets, error)))
            assert seen == [({TP(topic, 1): OffsetAndMetadata(4)}, None)]
            assert (await consumer.committed([TP(topic, 1)]))[TP(topic, 1)] == \
                OffsetAndMetadata(4, "", -1)
        # A new member of the group starts at the committed offsets.
        async with Consumer(bootstrap, group_id=group, **FAST_GROUP) as again:
            again.subscribe([topic])
            rest = await poll_until(again, lambda got: len(got) >= 3)
            assert sorted((r.partition, r.offset) for r in rest) == [(0, 3), (0, 4), (1, 4)]

    run(test())


def test_auto_commit_commits_only_records_poll_returned(bootstrap: str) -> None:
    async def test() -> None:
        topic = await new_topic(bootstrap, 1, 30)
        group = unique("g")
        consumer = await Consumer(bootstrap, group_id=group, max_poll_records=5,
                                  auto_commit_interval_ms=1, **FAST_GROUP).start()
        try:
            consumer.subscribe([topic])
            first = await poll_until(consumer, lambda got: len(got) >= 5)
            assert [r.offset for r in first] == [0, 1, 2, 3, 4]
            await asyncio.sleep(0.05)  # the auto-commit interval (1 ms) has passed
            second = await consumer.poll(5)  # auto-commits what the first poll returned
            assert [r.offset for r in second] == [5, 6, 7, 8, 9]
            # 30 records were fetched, 10 returned: the commit is of the 5 returned before.
            assert (await consumer.committed([TP(topic, 0)]))[TP(topic, 0)].offset == 5
        finally:
            await consumer.close()  # auto-commits the 10 returned
        async with Consumer(bootstrap, group_id=group, **FAST_GROUP) as check:
            assert (await check.committed([TP(topic, 0)]))[TP(topic, 0)].offset == 10

    run(test())


def test_pattern_subscription_picks_up_a_topic_created_later(bootstrap: str) -> None:
    async def test() -> None:
        prefix = unique("pat")
        first = await new_topic(bootstrap, 1, 2, name=f"{prefix}-a")
        async with Consumer(bootstrap, group_id=unique("g"), metadata_max_age_ms=300,
                            **FAST_GROUP) as consumer:
            consumer.subscribe(pattern=f"{prefix}-.*")
            got = await poll_until(consumer, lambda got: len(got) >= 2)
            assert {r.topic for r in got} == {first}
            later = await new_topic(bootstrap, 1, 3, name=f"{prefix}-b")
            more = await poll_until(consumer, lambda got: len(got) >= 3)
            assert {r.topic for r in more} == {later}
            assert consumer.subscription() == {first, later}

    run(test())


def test_positions_seek_pause_offsets_for_times_and_deserializers(
        bootstrap: str, request: pytest.FixtureRequest) -> None:
    skip_on_tansu(bootstrap, request, "answers ListOffsets LATEST with 1 for a partition of "
                  "3 records (measured), so seek_to_end cannot be checked")

    async def test() -> None:
        topic = await new_topic(bootstrap, 2)
        await produce(bootstrap, topic, 6, 2, value=lambda i: json.dumps({"n": i}).encode())
        seen: list[int] = []

        class Counting:
            def on_consume(self, records: list[Any]) -> list[Any]:
                seen.append(len(records))
                return [r for r in records if r.value["n"] != 0]

        p0, p1 = TP(topic, 0), TP(topic, 1)
        async with Consumer(bootstrap, value_deserializer="json", interceptors=[Counting()],
                            auto_offset_reset="earliest", max_wait_ms=100) as consumer:
            consumer.assign([p0, p1])
            consumer.pause([p1])
            assert consumer.paused() == {p1}
            got = await poll_until(consumer, lambda got: len(got) >= 2, 10)
            assert [(r.partition, r.value) for r in got] == [(0, {"n": 2}), (0, {"n": 4})]
            assert sum(seen) == 3  # the interceptor saw record 0 and dropped it
            assert await consumer.position(p0) == 3
            consumer.resume([p1])
            got = await poll_until(consumer, lambda got: len(got) >= 3, 10)
            assert [r.value["n"] for r in got] == [1, 3, 5]
            consumer.seek(p0, 1)
            assert [r.value["n"] for r in await poll_until(
                consumer, lambda got: len(got) >= 2, 10)] == [2, 4]
            await consumer.seek_to_beginning([p1])
            assert await consumer.position(p1) == 0
            await consumer.seek_to_end()
            assert await consumer.position(p1) == 3
            times = await consumer.offsets_for_times({p0: 0, p1: 2**62})
            assert times[p0] is not None and times[p0].offset == 0 and times[p1] is None

    run(test())


def test_auto_offset_reset_none_without_a_committed_offset(bootstrap: str) -> None:
    async def test() -> None:
        topic = await new_topic(bootstrap, 1, 1)
        async with Consumer(bootstrap, group_id=unique("g"),
                            **{**FAST_GROUP, "auto_offset_reset": "none"}) as consumer:
            consumer.subscribe([topic])
            with pytest.raises(NoOffsetForPartitionError):
                await poll_until(consumer, lambda got: False, 20)

    run(test())


def test_member_that_stops_polling_leaves_and_its_commit_fails(
        bootstrap: str, request: pytest.FixtureRequest) -> None:
    skip_on_tansu(bootstrap, request, "does not complete the pending rebalance when the "
                  "member that stopped polling sends LeaveGroup (the join waits out the "
                  "rebalance timeout)")

    async def test() -> None:
        topic = await new_topic(bootstrap, 2, 4)
        group = unique("g")
        events: list[tuple[str, set[TP]]] = []

        class Listener:
            def on_partitions_assigned(self, tps: set[TP]) -> None:
                events.append(("assigned", tps))

            def on_partitions_lost(self, tps: set[TP]) -> None:
                events.append(("lost", tps))

        slow = await Consumer(bootstrap, group_id=group, enable_auto_commit=False,
                              max_poll_interval_ms=1500, **FAST_GROUP).start()
        other = await Consumer(bootstrap, group_id=group, **FAST_GROUP).start()
        try:
            slow.subscribe([topic], listener=Listener())
            await poll_until(slow, lambda got: len(got) >= 4)
            assert slow.assignment() == {TP(topic, 0), TP(topic, 1)}
            other.subscribe([topic])
            # ``slow`` stops polling: it leaves after max.poll.interval.ms and ``other``
            # gets every partition.
            deadline = time.monotonic() + 30
            while other.assignment() != {TP(topic, 0), TP(topic, 1)}:
                assert time.monotonic() < deadline, other.assignment()
                await other.poll(0.2)
            with pytest.raises(CommitFailedError):
                await slow.commit()
            # Its next poll reports the partitions lost and rejoins (``other`` leaves first:
            # a rejoin waits for every member, and ``other`` polls on this same task).
            await other.close()
            await slow.poll(3)
            assert ("lost", {TP(topic, 0), TP(topic, 1)}) in events
        finally:
            await slow.close()
            await other.close()

    run(test())


def test_a_commit_answered_unknown_member_fails_with_the_brokers_code(bootstrap: str) -> None:
    async def test() -> None:
        topic = await new_topic(bootstrap, 1, 1)
        group = unique("g")
        async with Consumer(bootstrap, group_id=group, enable_auto_commit=False,
                            **FAST_GROUP) as consumer:
            consumer.subscribe([topic])
            await poll_until(consumer, lambda got: len(got) >= 1)
            assert consumer.member is not None
            consumer.member.member_id = "not-" + consumer.member.member_id
            with pytest.raises(CommitFailedError) as failure:
                await consumer.commit()
            assert failure.value.error is not None and failure.value.error.code == 25

    run(test())


def test_static_member_restart_within_the_session_timeout_causes_no_rebalance(
        broker: Any) -> None:
    bootstrap = broker.bootstrap

    async def test() -> None:
        topic = await new_topic(bootstrap, 2)
        group = unique("g")
        events: list[str] = []

        class Recorder:
            def on_partitions_assigned(self, tps: set[TP]) -> None:
                events.append(f"assigned {sorted(tps)}")

            def on_partitions_revoked(self, tps: set[TP]) -> None:
                events.append(f"revoked {sorted(tps)}")

        async def poll_both(a: Consumer, b: Consumer, done: Callable[[], bool]) -> None:
            deadline = time.monotonic() + 30
            while not done():
                assert time.monotonic() < deadline, (a.assignment(), b.assignment())
                await asyncio.gather(a.poll(0.1), b.poll(0.1))

        dynamic = await Consumer(bootstrap, group_id=group, **FAST_GROUP).start()
        static = await Consumer(bootstrap, group_id=group, group_instance_id="static-1",
                                **FAST_GROUP).start()
        try:
            dynamic.subscribe([topic], listener=Recorder())
            static.subscribe([topic])
            await poll_both(dynamic, static, lambda: len(static.assignment()) == 1
                            and len(dynamic.assignment()) == 1)
            owned = static.assignment()
            before = list(events)
            await static.close()  # a static member sends no LeaveGroup
            static = await Consumer(bootstrap, group_id=group, group_instance_id="static-1",
                                    **FAST_GROUP).start()
            static.subscribe([topic])
            await poll_both(dynamic, static, lambda: static.assignment() == owned)
            end = time.monotonic() + 2
            while time.monotonic() < end:
                await asyncio.gather(dynamic.poll(0.2), static.poll(0.2))
            assert events == before  # the other member saw no rebalance
        finally:
            await static.close()
            await dynamic.close()

    run(test())
