"""The admin client's transaction calls (KIP-664) against a real strom broker: a transaction
left open by a producer is listed, described, its producer state read from the partition
leader, and aborted by a marker as Kafka's kafka-transactions.sh abort does. Tansu offers none
of these APIs: the client says so with UNSUPPORTED_VERSION."""

from __future__ import annotations

import asyncio
import time

import pytest

from strom.client import (
    AbortTransactionSpec,
    AdminClient,
    Fetcher,
    TransactionState,
)
from strom.common.errors import (
    KafkaError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
    error_class,
)
from strom.common.types import TopicPartition
from strom.testing import EmbeddedBroker
from tests.client.txn_helpers import (
    needs_aborted_filtering,
    new_topic,
    read,
    txn_producer,
    unique,
)

TransactionalIdNotFoundError = error_class("TRANSACTIONAL_ID_NOT_FOUND")


def test_an_open_transaction_listed_described_and_aborted(strom_broker: EmbeddedBroker) -> None:
    bootstrap = strom_broker.bootstrap

    async def test() -> None:
        topic = await new_topic(bootstrap)
        tid = unique("open")
        p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
        producer = await txn_producer(bootstrap, tid, transaction_timeout_ms=300_000)
        try:
            producer.begin_transaction()
            await producer.send(topic, b"open", partition=1)
            await producer.flush()
            async with AdminClient(bootstrap) as admin:
                ongoing = await admin.list_transactions([TransactionState.ONGOING])
                [listed] = [t for t in ongoing if t.transactional_id == tid]
                assert listed.producer_id == producer.producer_id
                assert listed.state == "Ongoing"
                coordinator = await admin.transactions.finder.find(tid)
                assert listed.coordinator_id == coordinator.node_id
                assert [t.transactional_id for t in await admin.list_transactions(
                    producer_ids=[producer.producer_id])] == [tid]
                assert not [t for t in await admin.list_transactions(
                    [TransactionState.COMPLETE_ABORT]) if t.transactional_id == tid]
                assert tid not in [t.transactional_id for t in await admin.list_transactions(
                    duration_ms=3_600_000)]

                described = (await admin.describe_transactions([tid]))[tid]
                assert described.state == "Ongoing"
                assert described.topic_partitions == {p1}
                assert described.producer_id == producer.producer_id
                assert described.producer_epoch == producer.producer_epoch
                assert described.transaction_timeout_ms == 300_000
                assert described.transaction_start_time_ms is not None
                assert described.coordinator_id == coordinator.node_id

                states = await admin.describe_producers([p0, p1])
                assert states[p0] == []
                [active] = states[p1]
                assert (active.producer_id, active.producer_epoch) == (
                    producer.producer_id, producer.producer_epoch)
                assert active.current_transaction_start_offset == 0
                assert active.last_sequence == 0

                # kafka-transactions.sh abort: an ABORT marker straight to the leader.
                await admin.abort_transaction(AbortTransactionSpec(
                    p1, active.producer_id, active.producer_epoch,
                    max(active.coordinator_epoch or 0, 0)))
                [after] = (await admin.describe_producers([p1]))[p1]
                assert after.current_transaction_start_offset is None
                # The last stable offset moved past the marker.
                async with Fetcher(bootstrap, isolation_level="read_committed") as fetcher:
                    assert (await fetcher.end_offsets([p1]))[p1] == 2
        finally:
            await producer.close()

    asyncio.run(test())


@needs_aborted_filtering
def test_aborted_by_the_admin_is_hidden_and_stale_epochs_refused(
        strom_broker: EmbeddedBroker) -> None:
    bootstrap = strom_broker.bootstrap

    async def test() -> None:
        topic = await new_topic(bootstrap, 1)
        tp = TopicPartition(topic, 0)
        producer = await txn_producer(bootstrap, unique("stale"))
        try:
            producer.begin_transaction()
            await producer.send(topic, b"hanging", partition=0)
            await producer.flush()
            async with AdminClient(bootstrap) as admin:
                [active] = (await admin.describe_producers([tp]))[tp]
                with pytest.raises(KafkaError) as stale:
                    await admin.abort_transaction(AbortTransactionSpec(
                        tp, active.producer_id, active.producer_epoch - 1, 0))
                assert stale.value.code == error_class("INVALID_PRODUCER_EPOCH").code
                await admin.abort_transaction(AbortTransactionSpec(
                    tp, active.producer_id, active.producer_epoch, 0))
        finally:
            await producer.close()
        assert await read(bootstrap, topic, 1, "read_committed") == []

    asyncio.run(test())


def test_errors(strom_broker: EmbeddedBroker) -> None:
    bootstrap = strom_broker.bootstrap

    async def test() -> None:
        async with AdminClient(bootstrap, request_timeout_s=3) as admin:
            with pytest.raises(TransactionalIdNotFoundError):
                await admin.describe_transactions([unique("never-used")])
            missing = TopicPartition(unique("missing"), 0)
            with pytest.raises(UnknownTopicOrPartitionError):
                await admin.describe_producers([missing])
            topic = await new_topic(bootstrap, 1)
            answers = await admin.describe_producers(
                [missing, TopicPartition(topic, 0)], partial=True)
            assert isinstance(answers[missing], UnknownTopicOrPartitionError)
            assert answers[TopicPartition(topic, 0)] == []
            brokers = (await admin.describe_cluster()).brokers
            on_broker = await admin.describe_producers([TopicPartition(topic, 0)],
                                                       broker_id=brokers[0].node_id)
            assert on_broker == {TopicPartition(topic, 0): []}

    asyncio.run(test())


def test_tansu_lacks_the_introspection_apis(tansu_bootstrap: str) -> None:
    """Tansu advertises neither DescribeProducers, ListTransactions, DescribeTransactions nor
    WriteTxnMarkers to clients: each call fails at once with UNSUPPORTED_VERSION naming the
    API, instead of sending a request the broker cannot parse."""

    async def test() -> None:
        topic = await new_topic(tansu_bootstrap, 1)
        tp = TopicPartition(topic, 0)
        async with AdminClient(tansu_bootstrap, request_timeout_s=5) as admin:
            started = time.monotonic()
            calls = [("DescribeProducers", admin.describe_producers([tp])),
                     ("ListTransactions", admin.list_transactions()),
                     ("DescribeTransactions", admin.describe_transactions(["x"])),
                     ("WriteTxnMarkers",
                      admin.abort_transaction(AbortTransactionSpec(tp, 1, 0, 0)))]
            for name, call in calls:
                with pytest.raises(UnsupportedVersionError, match=name):
                    await call
            assert time.monotonic() - started < 5

    asyncio.run(test())
