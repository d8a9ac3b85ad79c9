"""Kafka client properties → strom client arguments (strom.client.properties).

The mapping is pure; the real client classes are constructed from its output (constructors
do not connect) to show each supported key reaches the setting the client uses.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.client import AdminClient, Fetcher, Producer
from strom.client.properties import (
    ADMIN,
    CONSUMER,
    GROUP_KEYWORDS,
    PRODUCER,
    UnknownPropertyError,
    client_options,
)
from strom.client.records import ClientConfigError


def test_producer_keys_reach_the_producer() -> None:
    options = client_options("producer", {
        "bootstrap.servers": "127.0.0.1:1", "client.id": "p1", "acks": "1",
        "compression.type": "ZSTD", "linger.ms": "20", "batch.size": "1000",
        "max.request.size": "2000", "buffer.memory": "4096",
        "max.in.flight.requests.per.connection": "2", "delivery.timeout.ms": "3000",
        "request.timeout.ms": "2500", "security.protocol": "plaintext",
    })
    producer = Producer(**options)
    assert (producer.acks, producer.codec, producer.linger_s, producer.batch_size) == \
        (1, 4, 0.02, 1000)
    assert (producer.max_request_size, producer.buffer_memory, producer.max_in_flight) == \
        (2000, 4096, 2)
    assert (producer.delivery_timeout_s, producer.request_timeout_s) == (3.0, 2.5)
    assert producer.cluster.client_id == "p1"
    assert producer.cluster.bootstrap == [("127.0.0.1", 1)]
    idempotent = Producer(**client_options("producer", {"enable.idempotence": "true",
                                                        "acks": "all"}))
    assert idempotent.idempotent and idempotent.acks == -1


def test_consumer_keys_reach_the_fetcher() -> None:
    options = client_options("consumer", {
        "client.id": "c1", "auto.offset.reset": "earliest", "fetch.max.wait.ms": "50",
        "fetch.min.bytes": "10", "fetch.max.bytes": "1000", "max.partition.fetch.bytes": "100",
        "isolation.level": "read_committed", "group.id": "g", "enable.auto.commit": "false",
        "auto.commit.interval.ms": "100",
    })
    group = {k: options.pop(k) for k in GROUP_KEYWORDS}
    assert group == {"group_id": "g", "enable_auto_commit": False,
                     "auto_commit_interval_ms": 100}
    fetcher = Fetcher(**options)
    assert (fetcher.auto_offset_reset, fetcher.max_wait_ms, fetcher.min_bytes) == \
        ("earliest", 50, 10)
    assert (fetcher.max_bytes, fetcher.max_partition_bytes, fetcher.isolation_level) == \
        (1000, 100, 1)
    assert fetcher.cluster.client_id == "c1"


def test_admin_keys_reach_the_admin_client() -> None:
    admin = AdminClient(**client_options("admin", {"client.id": "a1",
                                                   "request.timeout.ms": "700"}))
    assert admin.cluster.client_id == "a1" and admin.request_timeout_s == 0.7


@pytest.mark.parametrize(("kind", "key", "value", "message"), [
    ("producer", "acks", "2", "acks must be one of all, -1, 0, 1"),
    ("producer", "linger.ms", "-1", "linger.ms must be an integer ≥ 0"),
    ("producer", "batch.size", "big", "batch.size must be an integer ≥ 1"),
    ("producer", "compression.type", "brotli", "compression.type must be one of"),
    ("producer", "enable.idempotence", "yes", "must be true or false"),
    ("consumer", "auto.offset.reset", "smallest", "must be one of earliest, latest, none"),
    ("consumer", "isolation.level", "committed", "read_uncommitted, read_committed"),
    ("admin", "security.protocol", "TLS", "security.protocol must be one of PLAINTEXT, SSL"),
    ("admin", "security.protocol", "SASL_PLAINTEXT", "sasl.mechanism must be one of PLAIN"),
    ("consumer", "ssl.truststore.type", "JKS", "only PEM files are read"),
])
def test_bad_values_are_named(kind: str, key: str, value: str, message: str) -> None:
    with pytest.raises(ClientConfigError, match=message):
        client_options(kind, {key: value})


def test_unknown_keys_are_refused_with_the_supported_list() -> None:
    with pytest.raises(UnknownPropertyError) as info:
        client_options("producer", {"retries": "3"})
    assert "unknown producer property 'retries'" in str(info.value)
    assert "linger.ms" in str(info.value) and "fetch.min.bytes" not in str(info.value)
    with pytest.raises(UnknownPropertyError, match=r"unknown consumer property 'ssl\.provider'"):
        client_options("consumer", {"ssl.provider": "SunJSSE"})
    # A consumer key is not an admin key, and the other way round.
    with pytest.raises(UnknownPropertyError, match=r"unknown admin property 'group\.id'"):
        client_options("admin", {"group.id": "g"})


def test_security_keys_make_one_client_security(tmp_path: Path) -> None:
    options = client_options("admin", {
        "security.protocol": "sasl_plaintext", "sasl.mechanism": "scram-sha-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule '
                            'required username="bob" password="b\\"pw";'})
    security = options["security"]
    assert (security.protocol, security.sasl_mechanism, security.username,
            security.password) == ("SASL_PLAINTEXT", "SCRAM-SHA-512", "bob", 'b"pw')
    assert AdminClient(**options).cluster.security is security
    with pytest.raises(ClientConfigError, match=r"needs sasl\.username and sasl\.password"):
        client_options("producer", {"security.protocol": "SASL_SSL",
                                    "sasl.mechanism": "PLAIN"})
    with pytest.raises(ClientConfigError, match=r"ssl\.ca\.location .*missing"):
        client_options("producer", {"security.protocol": "SSL",
                                    "ssl.ca.location": str(tmp_path / "missing")})


def test_idempotence_needs_acks_all() -> None:
    with pytest.raises(ClientConfigError, match="needs acks=all"):
        client_options("producer", {"enable.idempotence": "true", "acks": "1"})


def test_tables_share_the_common_keys() -> None:
    for table in (PRODUCER, CONSUMER, ADMIN):
        assert {"bootstrap.servers", "client.id", "request.timeout.ms"} <= set(table)


def test_producer_pipeline_keys() -> None:
    options = client_options("producer", {
        "key.serializer": "org.apache.kafka.common.serialization.StringSerializer",
        "value.serializer": "json", "partitioner": "murmur2_random", "max.block.ms": "250"})
    assert options == {"key_serializer": "org.apache.kafka.common.serialization.StringSerializer",
                       "value_serializer": "json", "partitioner": "murmur2_random",
                       "max_block_s": 0.25}
    producer = Producer(**options)
    assert producer.max_block_s == 0.25
    assert client_options("producer", {"partitioner.class": "org.apache.kafka.clients.producer."
                                       "RoundRobinPartitioner"})
    with pytest.raises(ClientConfigError, match="partitioner"):
        client_options("producer", {"partitioner": "crc16"})
    with pytest.raises(ClientConfigError, match=r"value\.serializer"):
        client_options("producer", {"value.serializer": "avro"})
