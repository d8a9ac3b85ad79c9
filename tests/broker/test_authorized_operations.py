"""Authorized operations in DescribeCluster, Metadata and DescribeGroups: what Kafka without an
authorizer reports (every operation its ACLs support for the resource type), only when asked
(otherwise Kafka's INT32_MIN sentinel)."""

from __future__ import annotations

import struct
import time
import uuid

from confluent_kafka import Consumer, TopicCollection
from confluent_kafka.admin import AclOperation, AdminClient, NewTopic

from strom.protocol import api
from strom.protocol.versions import ApiKey
from strom.testing import EmbeddedBroker
from tests.broker.raw import RawClient

CLUSTER_OPS = {AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
               AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
               AclOperation.DESCRIBE}
TOPIC_OPS = {AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
             AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
             AclOperation.ALTER_CONFIGS}
GROUP_OPS = {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}
NOT_REQUESTED = -(2**31)


def codes(ops: set[AclOperation]) -> set[int]:
    return {op.value for op in ops}


def test_cluster_operations(broker: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_cluster(include_authorized_operations=True).result(10)
    assert set(described.authorized_operations) == CLUSTER_OPS
    assert admin.describe_cluster().result(10).authorized_operations is None
    client = RawClient(broker.bootstrap)
    for asked in (True, False):
        cluster = client.call(ApiKey.DESCRIBE_CLUSTER, 1, {
            "include_cluster_authorized_operations": asked, "endpoint_type": 1})
        assert cluster.authorized_operations == (codes(CLUSTER_OPS) if asked else None)
        metadata = client.call(ApiKey.METADATA, 10, {
            "topics": [], "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": asked,
            "include_topic_authorized_operations": False})
        assert metadata.authorized_operations == (codes(CLUSTER_OPS) if asked else None)
    # The sentinel on the wire: DescribeCluster v0 ends with the field, then an empty tag
    # buffer.
    request = api.request(ApiKey.DESCRIBE_CLUSTER, 0,
                          {"include_cluster_authorized_operations": False})
    body = client.call_raw(ApiKey.DESCRIBE_CLUSTER, 0, request)
    assert body[-1] == 0 and struct.unpack(">i", body[-5:-1])[0] == NOT_REQUESTED
    client.close()


def test_topic_operations(broker: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    name = f"ops-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    asked = admin.describe_topics(TopicCollection([name]),
                                  include_authorized_operations=True)[name].result(10)
    assert set(asked.authorized_operations) == TOPIC_OPS
    plain = admin.describe_topics(TopicCollection([name]))[name].result(10)
    assert plain.authorized_operations is None
    client = RawClient(broker.bootstrap)
    for include in (True, False):
        metadata = client.call(ApiKey.METADATA, 12, {
            "topics": [{"name": name, "topic_id": None}, {"name": "ops-missing", "topic_id": None}],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": include})
        found, missing = metadata.topics
        # A request naming any topic by id is answered for its ids only (as Kafka).
        [unknown_id] = client.call(ApiKey.METADATA, 12, {
            "topics": [{"name": None, "topic_id": uuid.uuid4()}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": include}).topics
        assert found.authorized_operations == (codes(TOPIC_OPS) if include else None)
        # Kafka reports them for any topic named in the request, not for an unknown id.
        assert missing.error_code != 0
        assert missing.authorized_operations == (codes(TOPIC_OPS) if include else None)
        assert unknown_id.error_code != 0 and unknown_id.authorized_operations is None
    client.close()


def test_group_operations(broker: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    name = f"ops-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "session.timeout.ms": 6000})
    consumer.subscribe([name])
    deadline = time.monotonic() + 30
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.2)
    assert consumer.assignment()
    try:
        asked = admin.describe_consumer_groups(
            [group], include_authorized_operations=True)[group].result(10)
        assert set(asked.authorized_operations) == GROUP_OPS
        plain = admin.describe_consumer_groups([group])[group].result(10)
        assert plain.authorized_operations is None
    finally:
        consumer.close()
