"""``strom transactions`` (kafka-transactions.sh) and ``strom producers describe`` against a
real strom broker, with a transaction left open by strom.client's transactional producer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from strom.client import AdminClient, Producer
from strom.client.batching import build_batch
from strom.common.types import TopicPartition
from strom.protocol.versions import ApiKey
from strom.testing import EmbeddedBroker
from tests.cli.conftest import Result
from tests.client.txn_helpers import new_topic, txn_producer, unique

CLI = Callable[..., Result]


def table(out: str) -> list[list[str]]:
    """Rows of Kafka's layout: cells padded and each followed by a tab."""
    lines = out.splitlines()
    assert lines and all(line.endswith("\t") for line in lines), repr(out)
    return [[cell.strip() for cell in line.split("\t")[:-1]] for line in lines]


class OpenTransaction:
    """A transactional producer with a transaction open on partition 1 of a new topic,
    driven on its own event loop between the CLI calls."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.tid = unique("cli")
        self.loop = asyncio.new_event_loop()
        self.topic = self.loop.run_until_complete(new_topic(bootstrap))
        self.producer: Producer = self.loop.run_until_complete(self._open())

    async def _open(self) -> Producer:
        producer = await txn_producer(self.bootstrap, self.tid)
        producer.begin_transaction()
        await producer.send(self.topic, b"open", partition=1)
        await producer.flush()
        return producer

    def close(self) -> None:
        self.loop.run_until_complete(self.producer.close())
        self.loop.close()


@pytest.fixture
def open_txn(strom_broker: EmbeddedBroker) -> Iterator[OpenTransaction]:
    txn = OpenTransaction(strom_broker.bootstrap)
    try:
        yield txn
    finally:
        txn.close()


def test_list_and_describe(cli: CLI, open_txn: OpenTransaction) -> None:
    b = open_txn.bootstrap
    listed = cli("transactions", "list", "--bootstrap-server", b)
    assert listed.code == 0, listed.err
    rows = table(listed.out)
    assert rows[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    [mine] = [r for r in rows[1:] if r[0] == open_txn.tid]
    assert mine[2:] == [str(open_txn.producer.producer_id), "Ongoing"]

    described = cli("transactions", "describe", "--transactional-id", open_txn.tid,
                    "--bootstrap-server", b)
    assert described.code == 0, described.err
    header, row = table(described.out)
    assert header == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                      "TransactionState", "TransactionTimeoutMs",
                      "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                      "TopicPartitions"]
    assert row[0] == mine[1]
    assert row[1:6] == [open_txn.tid, str(open_txn.producer.producer_id),
                        str(open_txn.producer.producer_epoch), "Ongoing", "60000"]
    assert int(row[6]) <= time.time() * 1000 and int(row[7]) >= 0
    assert row[8] == f"{open_txn.topic}-1"

    missing = cli("transactions", "describe", "--transactional-id", "never-used",
                  "--bootstrap-server", b)
    assert missing.code == 1 and missing.out == ""
    assert "Failed to describe transaction state of transactional-id `never-used`" in (
        missing.err)
    assert "TRANSACTIONAL_ID_NOT_FOUND" in missing.err


@pytest.mark.parametrize("command", [("transactions", "describe-producers"),
                                     ("producers", "describe")])
def test_describe_producers(cli: CLI, open_txn: OpenTransaction,
                            command: tuple[str, str]) -> None:
    b = open_txn.bootstrap
    result = cli(*command, "--topic", open_txn.topic, "--partition", "1",
                 "--bootstrap-server", b)
    assert result.code == 0, result.err
    header, row = table(result.out)
    assert header == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                      "LastTimestamp", "CurrentTransactionStartOffset"]
    assert row[:4] == [str(open_txn.producer.producer_id),
                       str(open_txn.producer.producer_epoch), "-1", "0"]
    assert row[5] == "0"
    empty = cli(*command, "--topic", open_txn.topic, "--partition", "0", "--bootstrap-server", b)
    assert empty.code == 0 and len(table(empty.out)) == 1
    gone = cli(*command, "--topic", open_txn.topic, "--partition", "7", "--bootstrap-server", b,
               "--request-timeout-ms", "2000")
    assert gone.code == 1
    assert f"Failed to describe producers for partition {open_txn.topic}-7 on leader" in (
        gone.err)


def test_abort_by_start_offset_and_by_producer(cli: CLI, open_txn: OpenTransaction) -> None:
    b = open_txn.bootstrap
    topic = open_txn.topic
    nothing = cli("transactions", "abort", "--topic", topic, "--partition", "1",
                  "--bootstrap-server", b)
    assert nothing.code == 1 and "--start-offset (for brokers on 3.0 or above)" in nothing.err
    no_epoch = cli("transactions", "abort", "--topic", topic, "--partition", "1",
                   "--producer-id", "1", "--bootstrap-server", b)
    assert no_epoch.code == 1 and "Missing required argument --producer-epoch" in no_epoch.err
    wrong = cli("transactions", "abort", "--topic", topic, "--partition", "1",
                "--start-offset", "5", "--bootstrap-server", b)
    assert wrong.code == 1
    assert (f"Could not find any open transactions starting at offset 5 on partition "
            f"{topic}-1") in wrong.err

    aborted = cli("transactions", "abort", "--topic", topic, "--partition", "1",
                  "--start-offset", "0", "--bootstrap-server", b)
    assert aborted.code == 0, aborted.err
    assert aborted.out == ""
    after = table(cli("producers", "describe", "--topic", topic, "--partition", "1",
                      "--bootstrap-server", b).out)
    assert after[1][5] == "None"

    # The producer writes again (its transaction is still open at the coordinator, which
    # knows the partition): abort that one by producer id, epoch and coordinator epoch.
    async def write_again() -> None:
        await open_txn.producer.send(topic, b"again", partition=1)
        await open_txn.producer.flush()

    open_txn.loop.run_until_complete(write_again())
    row = table(cli("producers", "describe", "--topic", topic, "--partition", "1",
                    "--bootstrap-server", b).out)[1]
    assert row[5] == "2"  # after the data and the first abort marker
    by_producer = cli("transactions", "abort", "--topic", topic, "--partition", "1",
                      "--producer-id", row[0], "--producer-epoch", row[1],
                      "--coordinator-epoch", row[2], "--bootstrap-server", b)
    assert by_producer.code == 0, by_producer.err
    row = table(cli("producers", "describe", "--topic", topic, "--partition", "1",
                    "--bootstrap-server", b).out)[1]
    assert row[5] == "None"


async def _transactional_batch_without_transactional_id(bootstrap: str, topic: str) -> int:
    """Leave a transaction the coordinator never heard of: an idempotent producer id writes
    a transactional batch in a Produce request without a transactional id. Returns the
    broker's error code (0: written)."""
    async with AdminClient(bootstrap) as admin:
        conn = await admin.cluster.any_connection()
        init = await conn.request(ApiKey.INIT_PRODUCER_ID, {
            "transactional_id": None, "transaction_timeout_ms": 60000,
            "producer_id": -1, "producer_epoch": -1})
        batch = build_batch([(int(time.time() * 1000), None, b"hanging", [])],
                            producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                            base_sequence=0, transactional=True)
        leader = await admin.cluster.connection(
            await admin.cluster.leader_for(TopicPartition(topic, 0)))
        response = await leader.request(ApiKey.PRODUCE, {
            "transactional_id": None, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
        return int(response.responses[0].partition_responses[0].error_code)


def test_find_hanging(cli: CLI, open_txn: OpenTransaction) -> None:
    b = open_txn.bootstrap
    topic = open_txn.topic
    usage = cli("transactions", "find-hanging", "--bootstrap-server", b)
    assert usage.code == 1 and "requires either --topic or --broker-id" in usage.err
    usage = cli("transactions", "find-hanging", "--broker-id", "0", "--partition", "0",
                "--bootstrap-server", b)
    assert usage.code == 1 and "--partition argument requires --topic" in usage.err
    headers = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
               "StartOffset", "LastTimestamp", "Duration(min)"]

    # The open transaction on partition 1 is known to its coordinator: not hanging.
    time.sleep(0.01)
    result = cli("transactions", "find-hanging", "--topic", topic,
                 "--max-transaction-timeout", "0", "--bootstrap-server", b)
    assert result.code == 0, result.err
    assert table(result.out) == [headers]

    if asyncio.run(_transactional_batch_without_transactional_id(b, topic)):
        pytest.skip("the broker refuses transactional records without a transactional id "
                    "(as Kafka does), so no hanging transaction can be made here")
    time.sleep(0.01)
    for scope in (["--topic", topic], ["--topic", topic, "--partition", "0"],
                  ["--broker-id", str(_any_broker(b))]):
        result = cli("transactions", "find-hanging", *scope, "--max-transaction-timeout", "0",
                     "--bootstrap-server", b)
        assert result.code == 0, result.err
        rows = [r for r in table(result.out) if r[0] in (headers[0], topic)]
        assert rows[0] == headers
        [hanging] = rows[1:]
        assert hanging[:2] == [topic, "0"] and hanging[4:6] == ["-1", "0"]
        assert hanging[7] == "0"
    # Not older than the default 15 minutes.
    assert table(cli("transactions", "find-hanging", "--topic", topic,
                     "--bootstrap-server", b).out) == [headers]


def _any_broker(bootstrap: str) -> int:
    async def first() -> Any:
        async with AdminClient(bootstrap) as admin:
            return (await admin.describe_cluster()).brokers[0].node_id

    return int(asyncio.run(first()))


def test_every_replica_describes_its_producers(
        cli: CLI, strom_cluster_factory: Callable[..., Any]) -> None:
    # Kafka answers DescribeProducers from any replica holding the log (find-hanging
    # --broker-id asks a broker about every replica it holds); strom's followers did answer
    # NOT_LEADER_OR_FOLLOWER, so find-hanging --broker-id failed on a cluster.
    cluster = strom_cluster_factory(3)
    b = cluster.bootstrap
    topic, tid = unique("rf3"), unique("cli-rf3")

    async def open_transaction() -> Producer:
        async with AdminClient(b) as admin:
            await admin.create_topic(topic, 1, 3)
        producer = await txn_producer(b, tid)
        producer.begin_transaction()
        await producer.send(topic, b"open", partition=0)
        await producer.flush()
        return producer

    loop = asyncio.new_event_loop()
    producer = loop.run_until_complete(open_transaction())
    try:
        for broker_id in sorted(cluster.brokers):
            deadline = time.monotonic() + 20
            while True:  # a follower holds the batch once it has fetched it
                result = cli("transactions", "describe-producers", "--broker-id",
                             str(broker_id), "--topic", topic, "--partition", "0",
                             "--bootstrap-server", b)
                rows = table(result.out) if result.code == 0 and result.out else []
                if len(rows) == 2 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert result.code == 0, (broker_id, result.err)
            assert rows[1][0] == str(producer.producer_id) and rows[1][5] == "0", broker_id
            hanging = cli("transactions", "find-hanging", "--broker-id", str(broker_id),
                          "--max-transaction-timeout", "0", "--bootstrap-server", b)
            assert hanging.code == 0, (broker_id, hanging.err)
            assert len(table(hanging.out)) == 1  # open, but its coordinator knows it
    finally:
        loop.run_until_complete(producer.close())
        loop.close()
