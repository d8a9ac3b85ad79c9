"""The internal topics' replication factor (``offsets.topic.replication.factor``,
``transaction.state.log.replication.factor``) on a real three-broker ZooKeeper cluster: the
topics are created on the first FindCoordinator of each kind (GROUP, TRANSACTION), with as
many replicas as configured, or as there are live brokers when fewer are (strom's difference
from Kafka, which refuses until enough brokers are up); ``__transaction_state``'s
``min.insync.replicas`` (``transaction.state.log.min.isr``) as DescribeConfigs shows it."""

from __future__ import annotations

import asyncio
import logging

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

from strom.client.conn import Connection
from strom.controller.internal_topics import internal_min_isr, internal_replication_factor
from strom.metadata.zookeeper import ZooKeeperMetadataStore
from strom.protocol import api
from strom.protocol.versions import ApiKey
from strom.testing.pytest_plugin import BrokerFactory
from tests.controller.cluster import IDS, start_cluster
from tests.metadata.zk_helpers import wait_until


def test_internal_topics_are_replicated_over_the_cluster(
        zookeeper_connect: str, strom_broker_factory: BrokerFactory,
        observer: ZooKeeperMetadataStore) -> None:
    brokers = start_cluster(zookeeper_connect, strom_broker_factory, observer, {
        "offsets.topic.num.partitions": 3, "transaction.state.log.num.partitions": 2,
        "transaction.state.log.replication.factor": 5})  # more than there are brokers
    first = brokers[IDS[0]]

    async def find_coordinators() -> list[int]:
        conn = await Connection(first.host, first.port).open()
        try:
            codes = []
            for key_type in (0, 1):  # GROUP, TRANSACTION
                raw = await conn.send(ApiKey.FIND_COORDINATOR, 4, api.request(
                    ApiKey.FIND_COORDINATOR, 4, {"key_type": key_type,
                                                 "coordinator_keys": ["k"]}))
                assert raw is not None
                codes += [c.error_code for c in api.decode_response(
                    ApiKey.FIND_COORDINATOR, 4, raw).coordinators]
            return codes
        finally:
            await conn.close()

    # the first FindCoordinator of each kind creates the internal topic
    assert asyncio.run(find_coordinators()) == [0, 0]
    wait_until(lambda: {"__consumer_offsets", "__transaction_state"}
               <= set(observer.image.topics), what="the internal topics")
    offsets = observer.image.topics["__consumer_offsets"]
    assert offsets.internal and len(offsets.partitions) == 3
    for p in offsets.partitions:  # the default factor, 3: every broker, leaders spread
        assert sorted(p.replicas) == list(IDS) and p.isr == p.replicas
    assert {p.leader for p in offsets.partitions} == set(IDS)
    txn = observer.image.topics["__transaction_state"]
    assert [sorted(p.replicas) for p in txn.partitions] == [list(IDS)] * 2  # capped at 3

    # DescribeConfigs (librdkafka) as Kafka answers it: __transaction_state carries its own
    # min.insync.replicas (transaction.state.log.min.isr, default 2); __consumer_offsets has
    # none and inherits the broker default (1).
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    resources = [ConfigResource("topic", t) for t in ("__transaction_state", "__consumer_offsets")]
    described = {r.name: f.result(15) for r, f in admin.describe_configs(resources).items()}
    txn_min_isr = described["__transaction_state"]["min.insync.replicas"]
    assert (txn_min_isr.value, txn_min_isr.source) == (
        "2", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    offsets_min_isr = described["__consumer_offsets"]["min.insync.replicas"]
    assert (offsets_min_isr.value, offsets_min_isr.source) == (
        "1", ConfigSource.DEFAULT_CONFIG.value)
    assert described["__transaction_state"]["unclean.leader.election.enable"].value == "false"


def test_a_factor_above_the_live_brokers_is_capped_with_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "strom.controller"):
        assert internal_replication_factor("__transaction_state", 3, 1) == 1
        assert internal_replication_factor("__transaction_state", 3, 0) == 1
    assert "fewer than the configured 3" in caplog.text
    caplog.clear()
    assert internal_replication_factor("__consumer_offsets", 2, 3) == 2
    assert caplog.text == ""


def test_the_transaction_log_min_isr_is_at_most_its_replication_factor() -> None:
    assert internal_min_isr(2, 3) == 2  # Kafka's defaults
    assert internal_min_isr(2, 1) == 1  # one broker: transactions still complete
    assert internal_min_isr(3, 5) == 3
