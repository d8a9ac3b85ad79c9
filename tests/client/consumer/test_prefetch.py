"""The consumer's background prefetch (strom.client.consumer.prefetch) against a real strom
broker: data fetched ahead never leaks past a seek, a pause, a rebalance or close, and
positions / commits only cover records poll returned."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest

from strom.client import Consumer, Producer
from strom.common.types import TopicPartition as TP
from tests.client.consumer.test_consumer import FAST_GROUP, new_topic, poll_until, produce, run
from tests.client.txn_helpers import txn_producer, unique


def offsets(records: list[Any]) -> list[int]:
    return [r.offset for r in records]


@pytest.mark.parametrize("how", ["seek", "seek_to_beginning"])
def test_seek_drops_the_in_flight_answer_for_the_old_position(broker: Any, how: str) -> None:
    """With ``seek`` the Fetch at the old position is answered (by the records produced)
    after the seek, so its answer must be dropped. (``seek_to_beginning`` sends ListOffsets
    on the same connection; observed: the waiting Fetch is then answered empty, so that case
    checks buffer and position only.)"""
    bootstrap = broker.bootstrap

    async def test() -> None:
        topic = await new_topic(bootstrap, 1, 10)
        tp = TP(topic, 0)
        async with Consumer(bootstrap, auto_offset_reset="earliest", max_wait_ms=5000,
                            max_poll_records=10) as consumer:
            consumer.assign([tp])
            assert offsets(await poll_until(consumer, lambda g: len(g) >= 10)) == \
                list(range(10))
            # poll handed out everything: a Fetch at offset 10 goes out and waits on the
            # broker (the sleep lets the task send it).
            await asyncio.sleep(0.3)
            assert consumer._prefetch.in_flight() == {tp}
            if how == "seek":
                consumer.seek(tp, 3)
                start = 3
            else:
                await consumer.seek_to_beginning([tp])
                start = 0
            assert await consumer.position(tp) == start
            await produce(bootstrap, topic, 5)  # the Fetch at 10 answers with 10..14
            got = await poll_until(consumer, lambda g: len(g) >= 15 - start)
            assert offsets(got) == list(range(start, 15))
            assert await consumer.position(tp) == 15

    run(test())


def test_pause_keeps_buffered_records_until_resume(broker: Any) -> None:
    bootstrap = broker.bootstrap

    async def test() -> None:
        topic = await new_topic(bootstrap, 2, 40)
        tps = [TP(topic, 0), TP(topic, 1)]
        async with Consumer(bootstrap, auto_offset_reset="earliest", max_wait_ms=100,
                            max_poll_records=5) as consumer:
            consumer.assign(tps)
            first = await poll_until(consumer, bool)
            held = TP(topic, first[0].partition)
            other = next(tp for tp in tps if tp != held)
            assert offsets(first) == [0, 1, 2, 3, 4]
            assert consumer._buffer[held]  # the rest of the fetch is buffered
            consumer.pause([held])
            assert await consumer.position(held) == 5
            rest = await poll_until(consumer, lambda g: len(g) >= 20, timeout_s=30)
            for _ in range(3):
                rest += await consumer.poll(0.2)
            assert {r.partition for r in rest} == {other.partition}
            assert offsets(rest) == list(range(20))
            assert await consumer.position(held) == 5
            consumer.resume([held])
            after = await poll_until(consumer, lambda g: len(g) >= 15)
            assert [(r.partition, r.offset) for r in after] == \
                [(held.partition, o) for o in range(5, 20)]

    run(test())


def test_rebalance_drops_revoked_data_and_commits_only_returned_records(broker: Any) -> None:
    """A reads slowly with buffered records; B joins and takes half the partitions from what
    A committed on revocation. Every record reaches exactly one of them (a commit past the
    returned records would lose some, buffered data of a revoked partition handed out by A
    would duplicate some). A's buffer is rarely empty here, so a Fetch in flight across the
    revocation is not reliably exercised."""
    bootstrap = broker.bootstrap
    partitions, total = 4, 2000

    async def test() -> None:
        topic = await new_topic(bootstrap, partitions, total)
        group = unique("g")
        options = {**FAST_GROUP, "group_id": group, "max_poll_records": 10,
                   "auto_commit_interval_ms": 600000, "partition_assignment_strategy": "range"}
        seen: Counter[tuple[int, int]] = Counter()
        stray: list[tuple[int, int]] = []

        async def consume(consumer: Consumer, pause_s: float, stop: asyncio.Event) -> None:
            while not stop.is_set():
                for r in await consumer.poll(0.2):
                    seen[(r.partition, r.offset)] += 1
                    if TP(topic, r.partition) not in consumer.assignment():
                        stray.append((r.partition, r.offset))
                if len(seen) >= total:
                    stop.set()
                await asyncio.sleep(pause_s)

        async with Consumer(bootstrap, **options) as a, Consumer(bootstrap, **options) as b:
            a.subscribe([topic])
            stop = asyncio.Event()
            reading = asyncio.create_task(consume(a, 0.02, stop))
            deadline = time.monotonic() + 30
            while len(seen) < 50:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            b.subscribe([topic])
            await asyncio.wait_for(asyncio.gather(reading, consume(b, 0, stop)), 60)
            assert a.assignment() and b.assignment()
        assert not stray
        assert len(seen) == total
        assert [k for k, n in seen.items() if n > 1] == []

    run(test())


def test_read_committed_with_prefetch(broker: Any) -> None:
    """An open transaction holds read_committed back at the last stable offset while a
    Fetch waits in the background; its commit releases the records in order."""
    bootstrap = broker.bootstrap

    async def test() -> None:
        topic = await new_topic(bootstrap, 1)
        tp = TP(topic, 0)
        producer = await txn_producer(bootstrap, unique("open"))
        try:
            async with Producer(bootstrap) as plain:
                await plain.send_and_wait(topic, b"before", partition=0)
                producer.begin_transaction()
                await producer.send(topic, b"in", partition=0)
                await producer.flush()
                await plain.send_and_wait(topic, b"after", partition=0)
            async with Consumer(bootstrap, isolation_level="read_committed",
                                auto_offset_reset="earliest", max_wait_ms=300) as consumer:
                consumer.assign([tp])
                seen = [r.value for r in await poll_until(consumer, bool)]
                for _ in range(3):
                    seen += [r.value for r in await consumer.poll(0.2)]
                assert seen == [b"before"] and await consumer.position(tp) == 1
                await producer.commit_transaction(30)
                seen += [r.value for r in await poll_until(consumer, lambda g: len(g) >= 2)]
                assert seen == [b"before", b"in", b"after"]
        finally:
            await producer.close()

    run(test())


def test_close_cancels_the_fetch_in_flight(broker: Any) -> None:
    bootstrap = broker.bootstrap

    async def test() -> None:
        topic = await new_topic(bootstrap, 1, 3)
        consumer = await Consumer(bootstrap, auto_offset_reset="earliest",
                                  max_wait_ms=10000).start()
        consumer.assign([TP(topic, 0)])
        assert len(await poll_until(consumer, lambda g: len(g) >= 3)) == 3
        assert consumer._prefetch.in_flight()  # a 10 s long poll waits on the broker
        started = time.monotonic()
        await consumer.close()
        assert time.monotonic() - started < 3
        assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("strom-prefetch")]

    problems: list[dict[str, Any]] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: problems.append(ctx))
        await test()

    asyncio.run(main())
    assert problems == []
