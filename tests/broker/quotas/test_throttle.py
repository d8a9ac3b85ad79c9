"""Which responses' clients wait out a throttle time themselves (KIP-219), as Kafka 4.4's
``AbstractResponse.shouldClientThrottle`` decides, and where the time goes in a body."""

from __future__ import annotations

import struct

import pytest

from strom.broker.quotas.throttle import client_throttles, throttle_offset, with_throttle
from strom.protocol import api
from strom.protocol.versions import ApiKey


@pytest.mark.parametrize(("key", "version", "expected"), [
    # Response classes that override it in kafka-clients 4.4.0 (the first version).
    (ApiKey.PRODUCE, 5, False), (ApiKey.PRODUCE, 6, True),
    (ApiKey.FETCH, 7, False), (ApiKey.FETCH, 8, True),
    (ApiKey.METADATA, 5, False), (ApiKey.METADATA, 6, True),
    (ApiKey.CREATE_TOPICS, 2, False), (ApiKey.CREATE_TOPICS, 3, True),
    (ApiKey.CREATE_ACLS, 1, True), (ApiKey.OFFSET_DELETE, 0, True),
    # The rest: whenever the response has a throttle_time_ms (3.x: never).
    (ApiKey.DESCRIBE_CLUSTER, 0, True), (ApiKey.LIST_TRANSACTIONS, 0, True),
    (ApiKey.DESCRIBE_PRODUCERS, 0, True), (ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, True),
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, True), (ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, True),
    (ApiKey.WRITE_TXN_MARKERS, 1, False), (ApiKey.SASL_AUTHENTICATE, 2, False),
    (ApiKey.SASL_HANDSHAKE, 1, False), (ApiKey.CONTROLLED_SHUTDOWN, 3, False),
])
def test_client_throttles_as_kafka_4_4(key: int, version: int, expected: bool) -> None:
    assert client_throttles(key, version) is expected


def test_the_throttle_time_is_written_where_the_schema_puts_it() -> None:
    body = api.response(ApiKey.DESCRIBE_CLUSTER, 2, {
        "throttle_time_ms": 0, "error_code": 0, "cluster_id": "c", "controller_id": 0,
        "brokers": [], "endpoint_type": 1})
    offset = throttle_offset(ApiKey.DESCRIBE_CLUSTER, 2)
    assert offset == 0
    [patched] = with_throttle(ApiKey.DESCRIBE_CLUSTER, 2, [body], 1234)
    assert struct.unpack_from(">i", bytes(patched), 0)[0] == 1234
    decoded = api.decode_response(ApiKey.DESCRIBE_CLUSTER, 2, bytes(patched))
    assert decoded.throttle_time_ms == 1234 and decoded.cluster_id == "c"
