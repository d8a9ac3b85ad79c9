"""Producer batching / retries / idempotence and fetcher positions against the fake broker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from strom.client.admin import AdminClient
from strom.client.fetcher import Fetcher, NoOffsetError
from strom.client.producer import Producer
from strom.client.records import ClientConfigError, RecordMetadata
from strom.common.errors import (
    CorruptMessageError,
    InvalidRecordError,
    MessageTooLargeError,
    NetworkError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from strom.common.types import TopicPartition
from strom.protocol.records import reader
from strom.protocol.records.batch import iter_batches
from strom.protocol.records.builder import EncodedRecords
from strom.protocol.records.reader import decode_batches
from strom.protocol.records.record import encode_record, encode_varint
from strom.protocol.versions import ApiKey
from tests.client.fake_broker import FakeBroker
from tests.native_twins import choose_implementation
from tests.storage.helpers import batch_around


def with_broker(test: Callable[[FakeBroker], Awaitable[None]]) -> None:
    async def main() -> None:
        broker = await FakeBroker().start()
        try:
            await test(broker)
        finally:
            await broker.stop()

    asyncio.run(main())


def test_produce_batches_per_partition_and_reports_offsets() -> None:
    async def test(broker: FakeBroker) -> None:
        broker.create("t", 2)
        async with Producer(broker.bootstrap, linger_ms=50, compression="gzip") as producer:
            futures = [await producer.send("t", b"v%d" % i, partition=i % 2,
                                           headers=[("h", b"x")]) for i in range(10)]
            await producer.flush()
        results = [f.result() for f in futures]
        assert results[:4] == [RecordMetadata(0, 0), RecordMetadata(1, 0),
                               RecordMetadata(0, 1), RecordMetadata(1, 1)]
        produces = [r for r in broker.requests if r[0] == ApiKey.PRODUCE]
        assert len(produces) == 1  # lingered: one request, one batch per partition
        _base, raw = broker.topics["t"][0].batches[0]
        [(header, records)] = list(decode_batches(raw))
        assert header.compression == 1 and header.records_count == 5
        assert [r.value for r in records] == [b"v0", b"v2", b"v4", b"v6", b"v8"]
        assert records[0].headers == [("h", b"x")]

    with_broker(test)


def test_keyed_records_use_murmur2() -> None:
    async def test(broker: FakeBroker) -> None:
        broker.create("t", 4)
        async with Producer(broker.bootstrap, linger_ms=0) as producer:
            md = await producer.send_and_wait("t", b"v", key=b"foobar")
        # toPositive(murmur2("foobar")) % 4 with murmur2 = -790332482
        assert md.partition == (-790332482 & 0x7FFFFFFF) % 4

    with_broker(test)


def test_retriable_error_is_retried_and_fatal_one_is_reported() -> None:
    async def test(broker: FakeBroker) -> None:
        broker.create("t")
        async with Producer(broker.bootstrap, linger_ms=0) as producer:
            broker.produce_errors = [NotLeaderOrFollowerError.code]
            assert await producer.send_and_wait("t", b"a") == RecordMetadata(0, 0)
            broker.produce_errors = [InvalidRecordError.code]
            with pytest.raises(InvalidRecordError):
                await producer.send_and_wait("t", b"b")
            assert await producer.send_and_wait("t", b"c") == RecordMetadata(0, 1)

    with_broker(test)


def test_idempotent_producer_numbers_batches() -> None:
    async def test(broker: FakeBroker) -> None:
        broker.create("t")
        async with Producer(broker.bootstrap, idempotent=True, linger_ms=0) as producer:
            for i in range(3):
                await producer.send_and_wait("t", b"%d" % i)
        headers = [next(iter(decode_batches(raw)))[0] for _, raw in broker.topics["t"][0].batches]
        assert [h.base_sequence for h in headers] == [0, 1, 2]
        assert {h.producer_id for h in headers} == {1001}

    with_broker(test)


def test_acks_zero_returns_minus_one_offsets() -> None:
    async def test(broker: FakeBroker) -> None:
        broker.create("t")
        async with Producer(broker.bootstrap, acks=0, linger_ms=0) as producer:
            assert await producer.send_and_wait("t", b"x") == RecordMetadata(0, -1)
            await asyncio.sleep(0.1)
        assert broker.topics["t"][0].next_offset == 1

    with_broker(test)


def test_producer_option_errors() -> None:
    with pytest.raises(ClientConfigError, match="acks"):
        Producer("h:1", acks=2)
    with pytest.raises(ClientConfigError, match="idempotent"):
        Producer("h:1", acks=1, idempotent=True)
    with pytest.raises(ClientConfigError, match="compression"):
        Producer("h:1", compression="brotli")


def test_send_to_missing_partition() -> None:
    async def test(broker: FakeBroker) -> None:
        broker.create("t", 2)
        async with Producer(broker.bootstrap) as producer:
            with pytest.raises(UnknownTopicOrPartitionError, match="partition 7"):
                await producer.send("t", b"x", partition=7)

    with_broker(test)


def test_fetcher_positions_and_partial_batches() -> None:
    async def test(broker: FakeBroker) -> None:
        broker.create("t", 2)
        async with Producer(broker.bootstrap, linger_ms=0, batch_size=1) as producer:
            for i in range(20):
                await producer.send("t", b"value-%02d" % i, key=b"k%d" % i, partition=0)
            await producer.flush()
        # A small fetch size cuts responses inside a batch: the reader must stop cleanly.
        async with Fetcher(broker.bootstrap, max_partition_bytes=150, max_wait_ms=10,
                           auto_offset_reset="earliest") as fetcher:
            fetcher.assign([TopicPartition("t", 0)])
            seen: list[int] = []
            while len(seen) < 20:
                seen += [r.offset for r in await fetcher.fetch()]
            assert seen == list(range(20))
            fetcher.seek(TopicPartition("t", 0), 15)
            records = await fetcher.fetch()
            assert records[0].offset == 15 and records[0].key == b"k15"
            assert fetcher.high_watermark(TopicPartition("t", 0)) == 20
            await fetcher.seek_to_end()
            assert fetcher.position(TopicPartition("t", 0)) == 20
            assert await fetcher.fetch() == []
            assert await fetcher.end_offsets() == {TopicPartition("t", 0): 20}

    with_broker(test)


def test_fetcher_offset_out_of_range_resets() -> None:
    async def test(broker: FakeBroker) -> None:
        broker.create("t")
        async with Producer(broker.bootstrap, linger_ms=0) as producer:
            await producer.send_and_wait("t", b"x")
        async with Fetcher(broker.bootstrap, max_wait_ms=10,
                           auto_offset_reset="earliest") as fetcher:
            await fetcher.assign_topic("t")
            fetcher.seek(TopicPartition("t", 0), 100)
            assert await fetcher.fetch() == []
            assert fetcher.position(TopicPartition("t", 0)) == 0
            assert [r.value for r in await fetcher.fetch()] == [b"x"]
        async with Fetcher(broker.bootstrap, auto_offset_reset="none") as fetcher:
            await fetcher.assign_topic("t")
            with pytest.raises(NoOffsetError):
                await fetcher.fetch()

    with_broker(test)


def test_admin_create_topic_errors_carry_broker_message() -> None:
    async def test(broker: FakeBroker) -> None:
        async with AdminClient(broker.bootstrap) as admin:
            created = await admin.create_topic("new", 3)
            assert created.num_partitions == 3
            assert await admin.list_topics() == ["new"]
            with pytest.raises(TopicAlreadyExistsError, match="already exists"):
                await admin.create_topic("new", 1)
            [desc] = await admin.describe_topics(["new"])
            assert [p.leader for p in desc.partitions] == [0, 0, 0]
            with pytest.raises(UnknownTopicOrPartitionError):
                await admin.describe_topics(["nope"])

    with_broker(test)


def test_admin_follows_not_controller() -> None:
    async def test(broker: FakeBroker) -> None:
        calls = 0

        async def first_not_controller(key: int, version: int, request: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 1:
                return {"topics": [{"name": t.name, "error_code": 41} for t in request.topics]}
            return None

        broker.hooks[ApiKey.CREATE_TOPICS] = first_not_controller
        async with AdminClient(broker.bootstrap) as admin:
            await admin.create_topic("moved", 1)
        assert calls == 2 and "moved" in broker.topics

    with_broker(test)


def test_oldest_supported_versions_round_trip() -> None:
    old: dict[int, tuple[int, int]] = {
        ApiKey.API_VERSIONS: (0, 0), ApiKey.METADATA: (1, 1), ApiKey.PRODUCE: (3, 3),
        ApiKey.FETCH: (4, 4), ApiKey.LIST_OFFSETS: (1, 1), ApiKey.CREATE_TOPICS: (2, 2),
    }

    async def main() -> None:
        broker = await FakeBroker(old).start()
        try:
            async with AdminClient(broker.bootstrap) as admin:
                await admin.create_topic("old", 1)
                assert admin.cluster.metadata.cluster_id is None  # Metadata v1 has none
            async with Producer(broker.bootstrap, linger_ms=0) as producer:
                assert await producer.send_and_wait("old", b"v", key=b"k") == RecordMetadata(0, 0)
            async with Fetcher(broker.bootstrap, max_wait_ms=10) as fetcher:
                await fetcher.assign_topic("old")
                await fetcher.seek_to_beginning()
                [record] = await fetcher.fetch()
                assert (record.key, record.value) == (b"k", b"v")
            versions = {(key, version) for key, version, _ in broker.requests}
            assert {(ApiKey.PRODUCE, 3), (ApiKey.FETCH, 4), (ApiKey.LIST_OFFSETS, 1)} <= versions
        finally:
            await broker.stop()

    asyncio.run(main())


def _values(broker: FakeBroker, topic: str) -> list[bytes | None]:
    return [r.value for _, raw in broker.topics[topic][0].batches
            for _, records in decode_batches(raw) for r in records]


def test_idempotent_pipelining_keeps_order_across_a_retry() -> None:
    async def test(broker: FakeBroker) -> None:
        broker.create("t")

        async def slow(key: int, version: int, request: Any) -> None:
            await asyncio.sleep(0.02)  # keep several requests in flight

        broker.hooks[ApiKey.PRODUCE] = slow
        async with Producer(broker.bootstrap, idempotent=True, linger_ms=0,
                            batch_size=1) as producer:
            futures = [await producer.send("t", b"%02d" % i) for i in range(3)]
            await asyncio.sleep(0.005)
            # The next batch fails retriably; the ones behind it come back out of order.
            broker.produce_errors = [NotLeaderOrFollowerError.code]
            futures += [await producer.send("t", b"%02d" % i) for i in range(3, 12)]
            await producer.flush()
        assert [f.result().offset for f in futures] == list(range(12))
        assert _values(broker, "t") == [b"%02d" % i for i in range(12)]
        in_flight = max(len(r[2].topic_data[0].partition_data) for r in broker.requests
                        if r[0] == ApiKey.PRODUCE)
        assert in_flight == 1  # one batch per partition per request, as Kafka requires

    with_broker(test)


def test_idempotent_fatal_error_renumbers_later_batches() -> None:
    async def test(broker: FakeBroker) -> None:
        broker.create("t")
        async with Producer(broker.bootstrap, idempotent=True, linger_ms=0) as producer:
            assert (await producer.send_and_wait("t", b"a")).offset == 0
            broker.produce_errors = [InvalidRecordError.code]
            with pytest.raises(InvalidRecordError):
                await producer.send_and_wait("t", b"bad")
            assert (await producer.send_and_wait("t", b"c")).offset == 1
        assert _values(broker, "t") == [b"a", b"c"]

    with_broker(test)


def test_send_many_interleaves_with_send_and_reports_per_batch() -> None:
    async def test(broker: FakeBroker) -> None:
        broker.create("t", 2)
        async with Producer(broker.bootstrap, linger_ms=50, batch_size=200) as producer:
            first = await producer.send("t", b"a", partition=0)
            outcomes = await producer.send_many("t", [
                (0, None, b"m%d" % i, None, 1000 + i) for i in range(10)
            ] + [(None, b"foobar", b"keyed", [("h", b"x")], None)])
            last = await producer.send("t", b"z", partition=0)
            await producer.flush()
        assert len(outcomes) >= 2  # 10 records of ~24 bytes do not fit one 200-byte batch
        assert all(o.done() and o.exception() is None for o in outcomes)
        assert first.result() == RecordMetadata(0, 0)
        # murmur2("foobar") puts the keyed record on partition 0 too, before "z".
        assert (-790332482 & 0x7FFFFFFF) % 2 == 0
        assert last.result() == RecordMetadata(0, 12)
        values = [r.value for _, raw in broker.topics["t"][0].batches
                  for _h, records in decode_batches(raw) for r in records]
        assert values == [b"a", *(b"m%d" % i for i in range(10)), b"keyed", b"z"]
        keyed = [r for _, raw in broker.topics["t"][0].batches
                 for _h, records in decode_batches(raw) for r in records if r.key]
        assert [(r.value, r.headers) for r in keyed] == [(b"keyed", [("h", b"x")])]

    with_broker(test)


def test_send_many_failed_batch_raises_from_its_future() -> None:
    async def test(broker: FakeBroker) -> None:
        broker.create("t")
        async with Producer(broker.bootstrap, linger_ms=0) as producer:
            broker.produce_errors = [InvalidRecordError.code]
            [outcome] = await producer.send_many("t", [(0, None, b"v", None, None)])
            with pytest.raises(InvalidRecordError):
                await outcome
            with pytest.raises(UnknownTopicOrPartitionError):
                await producer.send_many("t", [(5, None, b"v", None, None)])

    with_broker(test)


def test_idempotent_requests_leave_in_dispatch_order_while_connecting() -> None:
    """Batches dispatched while the leader's connection is being opened must not be
    overtaken by a batch dispatched once it is open: a broker accepts any first sequence
    from a producer it has no state for, so an overtaking batch would leave the earlier
    ones OUT_OF_ORDER_SEQUENCE_NUMBER until the delivery timeout."""
    async def test(broker: FakeBroker) -> None:
        broker.create("t")
        async with Producer(broker.bootstrap, idempotent=True, linger_ms=0, batch_size=1,
                            delivery_timeout_s=3.0, request_timeout_s=3.0) as producer:
            real = producer.cluster.connection
            calls = 0

            async def slow_waiters(node_id: int) -> Any:
                # The first callers of the leader's connection resume late, as tasks waiting
                # for a connection that is being opened do when the loop is busy.
                nonlocal calls
                calls += 1
                late = calls <= 2
                conn = await real(node_id)
                if late:
                    await asyncio.sleep(0.1)
                return conn

            producer.cluster.connection = slow_waiters  # type: ignore[method-assign]
            futures = [await producer.send("t", b"%d" % i) for i in range(2)]
            await asyncio.sleep(0.03)
            futures.append(await producer.send("t", b"2"))
            await producer.flush()
        assert [f.result().offset for f in futures] == [0, 1, 2]
        sent = [batch.base_sequence for r in broker.requests if r[0] == ApiKey.PRODUCE
                for batch in iter_batches(bytearray(r[2].topic_data[0].partition_data[0]
                                                    .records))]
        assert sent == [0, 1, 2]  # in order, none rejected and retried

    with_broker(test)


def test_leader_connection_failures_are_retried_until_the_delivery_timeout() -> None:
    async def test(broker: FakeBroker) -> None:
        broker.create("t")
        drops = 1

        async def drop(key: int, version: int, request: Any) -> Any:
            nonlocal drops
            if drops:
                drops -= 1
                return "drop"
            return None

        async with Producer(broker.bootstrap, idempotent=True, linger_ms=0,
                            delivery_timeout_s=1.0, request_timeout_s=1.0) as producer:
            # The bootstrap connection is open; the leader's first one fails to negotiate.
            broker.hooks[ApiKey.API_VERSIONS] = drop
            assert (await producer.send_and_wait("t", b"a")).offset == 0
            drops = 1_000_000  # from now on no new connection gets through
            leader = producer.cluster.ready_connection(0)
            assert leader is not None
            await leader.close()  # the bootstrap connection (metadata) stays up
            with pytest.raises(NetworkError):
                await asyncio.wait_for(producer.send_and_wait("t", b"b"), 5.0)
            drops = 0
            assert (await producer.send_and_wait("t", b"c")).offset == 1
        assert _values(broker, "t") == [b"a", b"c"]

    with_broker(test)


def test_batches_without_a_leader_expire_at_the_delivery_timeout() -> None:
    async def test(broker: FakeBroker) -> None:
        broker.create("t")
        async with Producer(broker.bootstrap, linger_ms=0, delivery_timeout_s=0.5,
                            request_timeout_s=0.5) as producer:
            assert (await producer.send_and_wait("t", b"a")).offset == 0
            broker.leaderless.add("t")
            await producer.cluster.refresh(["t"])
            started = time.monotonic()
            with pytest.raises(RequestTimedOutError, match="no leader"):
                await asyncio.wait_for(producer.send_and_wait("t", b"b"), 5.0)
            assert time.monotonic() - started < 3.0
            broker.leaderless.clear()
            await producer.cluster.refresh(["t"])
            assert (await producer.send_and_wait("t", b"c")).offset == 1

    with_broker(test)


def _encoded(values: list[bytes], base_timestamp: int = 1000) -> EncodedRecords:
    """A records section of ``values`` (timestamps base, base+1, …)."""
    return EncodedRecords(b"".join(encode_record(i, i, None, v, ()) for i, v in enumerate(values)),
                          len(values), base_timestamp, base_timestamp + len(values) - 1)


def test_send_encoded_keeps_order_and_is_sealed_with_codec_and_sequences() -> None:
    async def test(broker: FakeBroker) -> None:
        broker.create("t", 2)
        async with Producer(broker.bootstrap, idempotent=True, linger_ms=50,
                            compression="zstd") as producer:
            first = await producer.send("t", b"a", partition=0)
            outcomes = await producer.send_encoded("t", [
                (0, _encoded([b"e0", b"e1"])), (1, _encoded([b"p1"])),
                (0, _encoded([b"e2", b"e3", b"e4"], 5000))])
            last = await producer.send("t", b"z", partition=0)
            await producer.flush()
        assert all(o.done() and o.exception() is None for o in outcomes)
        assert first.result() == RecordMetadata(0, 0)
        assert last.result() == RecordMetadata(0, 6)
        assert _values(broker, "t") == [b"a", b"e0", b"e1", b"e2", b"e3", b"e4", b"z"]
        batches = [decode_batches(raw) for _, raw in broker.topics["t"][0].batches]
        headers = [h for batch in batches for h, _ in batch]
        assert all(h.compression == 4 and h.producer_id >= 0 for h in headers)
        assert [h.base_sequence for h in headers] == [0, 1, 3, 6]
        assert [(h.base_timestamp, h.max_timestamp) for h in headers[1:3]] == [
            (1000, 1001), (5000, 5002)]

    with_broker(test)


def test_send_encoded_failed_batch_raises_and_later_ones_are_renumbered() -> None:
    async def test(broker: FakeBroker) -> None:
        broker.create("t")
        async with Producer(broker.bootstrap, idempotent=True, linger_ms=0) as producer:
            broker.produce_errors = [InvalidRecordError.code]
            [bad] = await producer.send_encoded("t", [(0, _encoded([b"x", b"y"]))])
            with pytest.raises(InvalidRecordError):
                await bad
            [good] = await producer.send_encoded("t", [(0, _encoded([b"a", b"b"]))])
            await good
        assert _values(broker, "t") == [b"a", b"b"]

    with_broker(test)


def test_send_encoded_limits_are_checked_before_anything_is_queued() -> None:
    async def test(broker: FakeBroker) -> None:
        broker.create("t")
        async with Producer(broker.bootstrap, batch_size=100, max_request_size=300) as producer:
            small = (0, _encoded([b"ok"]))
            with pytest.raises(MessageTooLargeError):
                await producer.send_encoded("t", [small, (0, _encoded([b"x" * 400]))])
            with pytest.raises(ValueError, match="exceeds batch_size=100"):
                await producer.send_encoded("t", [small, (0, _encoded([b"x" * 30] * 3))])
            with pytest.raises(ValueError, match="at least one record"):
                await producer.send_encoded("t", [(0, EncodedRecords(b"", 0, 0, 0))])
            with pytest.raises(UnknownTopicOrPartitionError):
                await producer.send_encoded("t", [small, (3, _encoded([b"v"]))])
            [one] = await producer.send_encoded("t", [(0, _encoded([b"x" * 150]))])
            await one  # a single record larger than batch_size still goes out alone
        assert _values(broker, "t") == [b"x" * 150]

    with_broker(test)


@pytest.fixture(params=["native", "python"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The fetcher's record decoding in C (when built), then in its Python twin."""
    return choose_implementation(request, monkeypatch, reader, "native_decode")


@pytest.mark.parametrize("fault", ["key-past-the-record", "header-key-not-utf8",
                                   "record-past-the-batch"])
def test_a_malformed_batch_from_the_broker_is_corrupt_message(decoder: str, fault: str) -> None:
    """A broker that sends a batch with a sound header and CRC but broken records: the fetch
    raises CorruptMessageError (whichever decoder runs) and the position stays put."""
    good = encode_record(0, 0, b"k", b"good", [("h", b"1")])
    body = {
        "key-past-the-record": b"\x00\x00\x02\x10ab\x01\x00",  # key length 8, 4 bytes left
        "header-key-not-utf8": b"\x00\x00\x02\x01\x01\x02\x02\xff\xfe\x01",
        "record-past-the-batch": b"\x00\x00\x02\x01\x01\x00",
    }[fault]
    length = len(body) + (8 if fault == "record-past-the-batch" else 0)
    bad = encode_varint(length) + body
    batch = bytes(batch_around(good + bad, 2))

    async def test(broker: FakeBroker) -> None:
        broker.create("t")
        partition = broker.topics["t"][0]
        partition.batches.append((0, batch))
        partition.next_offset = 2
        async with Fetcher(broker.bootstrap, max_wait_ms=10,
                           auto_offset_reset="earliest") as fetcher:
            await fetcher.assign_topic("t")
            with pytest.raises(CorruptMessageError):
                await fetcher.fetch()
            assert fetcher.position(TopicPartition("t", 0)) == 0

    with_broker(test)
