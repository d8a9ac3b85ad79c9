"""strom.client's transactional producer against real brokers: strom, and Tansu where Tansu
implements the call (it offers InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and
TxnOffsetCommit, but no read_committed filtering of aborted data)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from strom.client import (
    AbortableTransactionError,
    AdminClient,
    Consumer,
    ConsumerGroupMetadata,
    FatalTransactionError,
    FencedProducerError,
    Producer,
    SyncProducer,
    TransactionAbortedError,
    TransactionStateError,
)
from strom.client.records import ClientConfigError
from strom.common.errors import error_class
from strom.common.types import TopicPartition
from strom.protocol.records.builder import EncodedRecords
from strom.protocol.records.record import encode_record
from strom.testing import EmbeddedBroker
from tests.client.txn_helpers import (
    BROKER_DROPS_ABORTED,
    new_topic,
    read,
    txn_producer,
    unique,
)

BROKER_CONFIG = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 200}
FENCED_CODES = {error_class("PRODUCER_FENCED").code, error_class("INVALID_PRODUCER_EPOCH").code}


@pytest.fixture(scope="module")
def txn_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(BROKER_CONFIG) as broker:
        yield broker


@pytest.fixture(params=["strom", "tansu"])
def bootstrap(request: pytest.FixtureRequest) -> str:
    """A strom broker, then Tansu."""
    if request.param == "tansu":
        return str(request.getfixturevalue("tansu_bootstrap"))
    return str(request.getfixturevalue("txn_broker").bootstrap)


def broker_of(request: pytest.FixtureRequest) -> str:
    return str(request.node.callspec.params.get("bootstrap", "strom"))


def drops_aborted(request: pytest.FixtureRequest) -> bool:
    """Whether the test's broker hides aborted records from read_committed fetches (Tansu
    does not: it returns no aborted transactions)."""
    return broker_of(request) == "strom" and BROKER_DROPS_ABORTED


def test_commit_and_abort(bootstrap: str, request: pytest.FixtureRequest) -> None:
    async def test() -> None:
        topic = await new_topic(bootstrap)
        producer = await txn_producer(bootstrap, unique("ca"))
        try:
            producer.begin_transaction()
            sent = [await producer.send(topic, f"c{i}".encode(), partition=i % 2)
                    for i in range(6)]
            await producer.commit_transaction(30)
            assert all(f.done() and f.result().offset >= 0 for f in sent)
            producer.begin_transaction()
            for i in range(4):
                await producer.send(topic, f"a{i}".encode(), partition=i % 2)
            await producer.flush()  # the aborted records reach the log
            await producer.abort_transaction(30)
            producer.begin_transaction()
            await producer.send(topic, b"last", partition=0)
            await producer.commit_transaction(30)
        finally:
            await producer.close()
        committed = sorted([f"c{i}".encode() for i in range(6)] + [b"last"])
        assert await read(bootstrap, topic) == sorted(committed + [f"a{i}".encode()
                                                                   for i in range(4)])
        async with AdminClient(bootstrap) as admin:
            ends = await admin.list_offsets({TopicPartition(topic, p): -1 for p in (0, 1)})
        # data and a marker per transaction and partition: p0 3+2+1 records, 3 markers
        assert [ends[TopicPartition(topic, p)].offset for p in (0, 1)] == [9, 7]
        if drops_aborted(request):
            assert await read(bootstrap, topic, isolation="read_committed") == committed

    asyncio.run(test())


def _section(values: list[bytes]) -> EncodedRecords:
    """A records section of ``values``, as a bulk encoder (the Spark writer) makes one."""
    now = int(time.time() * 1000)
    return EncodedRecords(b"".join(encode_record(i, 0, None, v) for i, v in enumerate(values)),
                          len(values), now, now)


def test_encoded_sections_commit_and_abort_with_the_transaction(
        bootstrap: str, request: pytest.FixtureRequest) -> None:
    """Pre-encoded sections (``send_encoded``) are sealed as transactional batches and their
    partitions added to the transaction, like records of ``send``."""
    async def test() -> None:
        topic = await new_topic(bootstrap)
        producer = await txn_producer(bootstrap, unique("enc"))
        try:
            producer.begin_transaction()
            await producer.send_encoded(topic, [(0, _section([b"c0", b"c1"])),
                                                (1, _section([b"c2"]))])
            await producer.commit_transaction(30)
            producer.begin_transaction()
            outcomes = await producer.send_encoded(topic, [(1, _section([b"a0", b"a1"]))])
            await asyncio.gather(*outcomes)  # the aborted records reach the log
            await producer.abort_transaction(30)
        finally:
            await producer.close()
        assert await read(bootstrap, topic) == [b"a0", b"a1", b"c0", b"c1", b"c2"]
        if drops_aborted(request):
            assert await read(bootstrap, topic, isolation="read_committed") == [
                b"c0", b"c1", b"c2"]

    asyncio.run(test())


def test_records_not_sent_when_aborted_fail_and_never_reach_the_log(bootstrap: str) -> None:
    async def test() -> None:
        topic = await new_topic(bootstrap, 1)
        producer = await txn_producer(bootstrap, unique("unsent"), linger_ms=60_000)
        try:
            producer.begin_transaction()
            futures = [await producer.send(topic, b"never", partition=0) for _ in range(3)]
            await producer.abort_transaction(30)
            for future in futures:
                with pytest.raises(TransactionAbortedError):
                    await future
            with pytest.raises(TransactionStateError):
                await producer.send(topic, b"outside a transaction")
        finally:
            await producer.close()
        assert await read(bootstrap, topic, 1) == []

    asyncio.run(test())


def test_a_new_incarnation_fences_the_zombie(bootstrap: str,
                                            request: pytest.FixtureRequest) -> None:
    if broker_of(request) == "tansu":
        pytest.skip("Tansu closes the connection on an EndTxn with a fenced epoch instead of "
                    "answering PRODUCER_FENCED; the client retries it as a lost connection "
                    "until the call times out, as Kafka's client does")

    async def test() -> None:
        topic = await new_topic(bootstrap)
        tid = unique("zombie")
        zombie = await txn_producer(bootstrap, tid)
        successor: Producer | None = None
        try:
            zombie.begin_transaction()
            await zombie.send(topic, b"from the zombie", partition=0)
            await zombie.flush()
            successor = await txn_producer(bootstrap, tid)  # aborts the zombie's transaction
            assert successor.producer_id == zombie.producer_id
            assert successor.producer_epoch > zombie.producer_epoch
            successor.begin_transaction()
            await successor.send(topic, b"from the successor", partition=1)
            await successor.commit_transaction(30)
            with pytest.raises(FencedProducerError) as fenced:
                await zombie.commit_transaction(30)
            assert fenced.value.fatal and not fenced.value.abortable
            assert fenced.value.code in FENCED_CODES
            # Fatal: every later call raises it again, abort included.
            with pytest.raises(FencedProducerError):
                zombie.begin_transaction()
            with pytest.raises(FencedProducerError):
                await zombie.abort_transaction(30)
        finally:
            await zombie.close()
            if successor is not None:
                await successor.close()
        assert b"from the successor" in await read(bootstrap, topic)

    asyncio.run(test())


def test_a_zombie_writing_after_being_fenced(txn_broker: EmbeddedBroker) -> None:
    """Kafka's classification (KIP-588): the zombie's Produce fails INVALID_PRODUCER_EPOCH,
    which only makes the transaction abortable; the abort then meets PRODUCER_FENCED at the
    coordinator, which is fatal."""
    bootstrap = txn_broker.bootstrap

    async def test() -> None:
        topic = await new_topic(bootstrap, 1)
        tid = unique("late-zombie")
        zombie = await txn_producer(bootstrap, tid)
        successor = None
        try:
            zombie.begin_transaction()
            await zombie.send(topic, b"first", partition=0)
            await zombie.flush()
            successor = await txn_producer(bootstrap, tid)
            late = await zombie.send(topic, b"after the fence", partition=0)
            with pytest.raises(AbortableTransactionError) as abortable:
                await zombie.commit_transaction(30)
            assert abortable.value.code == error_class("INVALID_PRODUCER_EPOCH").code
            assert late.done() and late.exception() is not None
            with pytest.raises(FencedProducerError) as fenced:
                await zombie.abort_transaction(30)
            assert fenced.value.code == error_class("PRODUCER_FENCED").code
        finally:
            await zombie.close()
            if successor is not None:
                await successor.close()

    asyncio.run(test())


def test_send_offsets_are_committed_only_with_the_transaction(bootstrap: str) -> None:
    async def test() -> None:
        source, sink = await new_topic(bootstrap, 1), await new_topic(bootstrap, 1)
        group = unique("group")
        tp = TopicPartition(source, 0)
        producer = await txn_producer(bootstrap, unique("offsets"))
        try:
            async with AdminClient(bootstrap) as admin:
                producer.begin_transaction()
                await producer.send(sink, b"aborted", partition=0)
                await producer.send_offsets_to_transaction({tp: 5}, ConsumerGroupMetadata(group))
                await producer.abort_transaction(30)
                assert tp not in await admin.list_consumer_group_offsets(group, [tp]) or (
                    (await admin.list_consumer_group_offsets(group, [tp]))[tp].offset == -1)
                producer.begin_transaction()
                await producer.send(sink, b"committed", partition=0)
                await producer.send_offsets_to_transaction({tp: 7}, group)
                await producer.commit_transaction(30)
                deadline = time.monotonic() + 10
                while (committed := (await admin.list_consumer_group_offsets(
                        group, [tp])).get(tp)) is None or committed.offset != 7:
                    assert time.monotonic() < deadline, f"offset not committed: {committed}"
                    await asyncio.sleep(0.05)
        finally:
            await producer.close()

    asyncio.run(test())


def test_offsets_of_a_fenced_group_member_make_the_transaction_abortable(
        txn_broker: EmbeddedBroker) -> None:
    bootstrap = txn_broker.bootstrap

    async def test() -> None:
        source = await new_topic(bootstrap, 1)
        producer = await txn_producer(bootstrap, unique("member"))
        try:
            producer.begin_transaction()
            stale = ConsumerGroupMetadata(unique("nogroup"), generation_id=3,
                                          member_id="gone-member")
            with pytest.raises(AbortableTransactionError) as failure:
                await producer.send_offsets_to_transaction(
                    {TopicPartition(source, 0): 1}, stale, 30)
            assert failure.value.abortable and not failure.value.fatal
            assert failure.value.code in {error_class("ILLEGAL_GENERATION").code,
                                          error_class("UNKNOWN_MEMBER_ID").code}
            with pytest.raises(AbortableTransactionError):
                await producer.commit_transaction(30)
            await producer.abort_transaction(30)  # the producer stays usable
            producer.begin_transaction()
            await producer.send(source, b"after the abort", partition=0)
            await producer.commit_transaction(30)
        finally:
            await producer.close()
        assert await read(bootstrap, source, 1) == [b"after the abort"]

    asyncio.run(test())


def test_a_consumers_group_metadata_fences_its_offsets_after_a_rebalance(
        txn_broker: EmbeddedBroker) -> None:
    # consumer.group_metadata() carries the generation and member id (KIP-447): the offsets
    # of a member that a rebalance has since replaced are refused, not committed.
    bootstrap = txn_broker.bootstrap

    async def test() -> None:
        source = await new_topic(bootstrap, 2)
        group = unique("eos-group")
        tp = TopicPartition(source, 0)
        producer = await txn_producer(bootstrap, unique("member-meta"))
        options = {"group_id": group, "enable_auto_commit": False, "session_timeout_ms": 6000,
                   "heartbeat_interval_ms": 500, "max_poll_interval_ms": 10000}
        first = await Consumer(bootstrap, **options).start()
        second: Consumer | None = None
        try:
            first.subscribe([source])
            deadline = time.monotonic() + 30
            while not first.assignment():
                assert time.monotonic() < deadline, "the first member got no partitions"
                await first.poll(0.2)
            meta = first.group_metadata()
            assert (meta.group_id, meta.member_id) == (group, first.member.member_id)
            assert meta.generation_id >= 1
            producer.begin_transaction()
            await producer.send(source, b"in the transaction", partition=1)
            await producer.send_offsets_to_transaction({tp: 3}, meta, 30)
            await producer.commit_transaction(30)
            assert (await first.committed([tp]))[tp].offset == 3  # type: ignore[union-attr]
            # A second member joins: the first one's generation is gone once it rejoins.
            second = await Consumer(bootstrap, **options).start()
            second.subscribe([source])
            deadline = time.monotonic() + 30
            while first.group_metadata().generation_id == meta.generation_id or \
                    not second.assignment():
                assert time.monotonic() < deadline, "no rebalance"
                await asyncio.gather(first.poll(0.2), second.poll(0.2))
            producer.begin_transaction()
            with pytest.raises(AbortableTransactionError) as stale:
                await producer.send_offsets_to_transaction({tp: 9}, meta, 30)
            assert stale.value.code in {error_class("ILLEGAL_GENERATION").code,
                                        error_class("FENCED_INSTANCE_ID").code,
                                        error_class("UNKNOWN_MEMBER_ID").code}
            await producer.abort_transaction(30)
            assert (await first.committed([tp]))[tp].offset == 3  # type: ignore[union-attr]
            with pytest.raises(ClientConfigError):
                Consumer(bootstrap).group_metadata()
        finally:
            await producer.close()
            await first.close()
            if second is not None:
                await second.close()

    asyncio.run(test())


def test_the_coordinator_aborts_a_timed_out_transaction(txn_broker: EmbeddedBroker) -> None:
    bootstrap = txn_broker.bootstrap

    async def test() -> None:
        topic = await new_topic(bootstrap, 1)
        producer = await txn_producer(bootstrap, unique("slow"), transaction_timeout_ms=1000)
        try:
            producer.begin_transaction()
            await producer.send(topic, b"too late", partition=0)
            await producer.flush()
            await asyncio.sleep(2.5)  # past transaction.timeout.ms: fenced and aborted
            with pytest.raises(FatalTransactionError) as failure:
                await producer.commit_transaction(30)
            assert failure.value.code in FENCED_CODES
        finally:
            await producer.close()
        if BROKER_DROPS_ABORTED:
            assert await read(bootstrap, topic, 1, "read_committed") == []

    asyncio.run(test())


def test_calls_in_the_wrong_state(txn_broker: EmbeddedBroker) -> None:
    bootstrap = txn_broker.bootstrap

    async def test() -> None:
        async with Producer(bootstrap, idempotent=True) as plain:
            with pytest.raises(TransactionStateError):
                plain.begin_transaction()
        producer = await Producer(bootstrap, transactional_id=unique("state")).start()
        try:
            with pytest.raises(TransactionStateError, match="init_transactions"):
                producer.begin_transaction()
            await producer.init_transactions(30)
            with pytest.raises(TransactionStateError):
                await producer.init_transactions(30)
            with pytest.raises(TransactionStateError, match="begin_transaction"):
                await producer.send("any", b"x")
            with pytest.raises(TransactionStateError):
                await producer.commit_transaction(30)
            producer.begin_transaction()
            with pytest.raises(TransactionStateError):
                producer.begin_transaction()
            await producer.commit_transaction(30)  # nothing sent: no EndTxn needed
        finally:
            await producer.close()

    asyncio.run(test())


def test_sync_producer_transactions(bootstrap: str) -> None:
    topic = asyncio.run(new_topic(bootstrap, 1))
    producer = SyncProducer(bootstrap, transactional_id=unique("sync"))
    try:
        producer.init_transactions(30)
        producer.begin_transaction()
        sent = producer.send(topic, b"committed", partition=0)
        producer.commit_transaction(30)
        assert sent.result(10).offset == 0
        producer.begin_transaction()
        producer.send(topic, b"aborted", partition=0)
        producer.flush(30)
        producer.abort_transaction(30)
        with pytest.raises(TransactionStateError):
            producer.send(topic, b"outside", partition=0)
    finally:
        producer.close()
    assert asyncio.run(read(bootstrap, topic, 1)) == [b"aborted", b"committed"]
