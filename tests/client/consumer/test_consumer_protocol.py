"""strom's consumer in KIP-848 groups (``group_protocol="consumer"``): consumer processes
joining, leaving and killed with nothing lost or read twice; revoke-first reconciliation; a
group shared with librdkafka's consumer-protocol members; exactly-once offsets through
``group_metadata()`` at the member epoch."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer as ConfluentConsumer

from strom.client.sync import SyncAdminClient, SyncConsumer, SyncProducer
from strom.common.types import TopicPartition
from strom.testing import EmbeddedBroker
from tests.client.consumer.test_consumer import unique
from tests.client.consumer.test_group_processes import (
    Worker,
    produce,
    stable,
    three_processes_one_leaves_one_is_killed,
    wait_for,
)

CONFIG = {"group.consumer.session.timeout.ms": 6000,
          "group.consumer.heartbeat.interval.ms": 300, "offsets.topic.num.partitions": 3}


@pytest.fixture(scope="module")
def kip848_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(config=CONFIG) as embedded:
        yield embedded


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for w in started:
        w.stop()


def test_three_processes_one_leaves_one_is_killed_nothing_lost_or_duplicated(
        kip848_broker: EmbeddedBroker, tmp_path: Path, workers: list[Worker]) -> None:
    three_processes_one_leaves_one_is_killed(kip848_broker.bootstrap, tmp_path, workers,
                                             "consumer-protocol")


def test_a_joining_member_takes_partitions_only_after_they_are_revoked(
        kip848_broker: EmbeddedBroker, tmp_path: Path, workers: list[Worker]) -> None:
    bootstrap, partitions = kip848_broker.bootstrap, 6
    topic, group = unique("kip848r"), unique("g")
    with SyncAdminClient(bootstrap) as admin:
        admin.create_topic(topic, partitions, 1)
    workers.append(Worker(bootstrap, group, topic, "consumer-protocol", tmp_path / "w0"))
    wait_for(lambda: len(workers[0].assignment()) == partitions, "the first owns all")
    workers.append(Worker(bootstrap, group, topic, "consumer-protocol", tmp_path / "w1"))
    wait_for(lambda: stable(workers, partitions) and all(
        len(w.assignment()) == 3 for w in workers), "three each")
    assert workers[0].events("revoked") == [workers[1].assignment()]  # only what moved
    assert workers[0].events("lost") == []


def test_strom_and_librdkafka_share_a_consumer_protocol_group(
        kip848_broker: EmbeddedBroker) -> None:
    bootstrap, partitions = kip848_broker.bootstrap, 4
    topic, group = unique("kip848m"), unique("g")
    with SyncAdminClient(bootstrap) as admin:
        admin.create_topic(topic, partitions, 1)
    theirs = ConfluentConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                "group.protocol": "consumer"})
    theirs.subscribe([topic])
    ours = SyncConsumer(bootstrap, group_id=group, group_protocol="consumer", max_wait_ms=100)
    try:
        ours.subscribe([topic])
        deadline = time.monotonic() + 30
        while True:
            ours.poll(0.1)
            theirs.poll(0.1)
            mine = {tp.partition for tp in ours.assignment()}
            other = {tp.partition for tp in theirs.assignment()}
            if len(mine) == len(other) == partitions // 2:
                break
            assert time.monotonic() < deadline, (mine, other)
        assert mine | other == set(range(partitions)) and not mine & other
    finally:
        ours.close()
        theirs.close()


def test_group_metadata_carries_the_member_epoch_for_exactly_once(
        kip848_broker: EmbeddedBroker) -> None:
    """send_offsets_to_transaction with a KIP-848 member's group metadata: the offsets are
    committed with the transaction (TxnOffsetCommit at the member epoch)."""
    bootstrap = kip848_broker.bootstrap
    topic, group = unique("kip848t"), unique("g")
    with SyncAdminClient(bootstrap) as admin:
        admin.create_topic(topic, 1, 1)
    produce(bootstrap, topic, 1, 5)
    consumer = SyncConsumer(bootstrap, group_id=group, group_protocol="consumer",
                            auto_offset_reset="earliest", enable_auto_commit=False,
                            max_wait_ms=100)
    producer = SyncProducer(bootstrap, transactional_id=unique("tx"))
    try:
        consumer.subscribe([topic])
        records: list[Any] = []
        deadline = time.monotonic() + 30
        while len(records) < 5 and time.monotonic() < deadline:
            records += consumer.poll(0.2)
        metadata = consumer.group_metadata()
        assert metadata.generation_id > 0 and metadata.member_id
        producer.init_transactions()
        producer.begin_transaction()
        producer.send_offsets_to_transaction({TopicPartition(topic, 0): 5}, metadata)
        producer.commit_transaction()
        with SyncAdminClient(bootstrap) as admin:
            committed = admin.list_consumer_group_offsets(group)
        assert [o.offset for o in committed.values()] == [5]
    finally:
        producer.close()
        consumer.close()
