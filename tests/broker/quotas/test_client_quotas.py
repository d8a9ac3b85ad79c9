"""Client quotas against a real broker: AlterClientQuotas / DescribeClientQuotas on the wire
(defaults, precedence, validate_only, errors, restart) and throttling measured with real
clients (confluent-kafka's producer and consumer)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from strom.broker.quotas.entities import resolve
from strom.protocol.versions import ApiKey
from strom.testing import EmbeddedBroker
from tests.broker.raw import RawClient

MB = 1_000_000


@pytest.fixture
def quota_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture
def short_window_broker() -> Iterator[EmbeddedBroker]:
    """Quota windows of 2 x 1 s: Kafka's meter lets a burst of (windows - 1) seconds' worth
    through each time a heavy window expires, so with the default 11 windows a rate holds
    only on average over 11 s; with 2 it holds over a few seconds."""
    with EmbeddedBroker({"quota.window.num": 2}) as broker:
        yield broker


def alter(client: RawClient, entity: dict[str, str | None], ops: dict[str, float | None],
          validate_only: bool = False, version: int = 1) -> Any:
    response = client.call(ApiKey.ALTER_CLIENT_QUOTAS, version, {
        "entries": [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity.items()],
                     "ops": [{"key": k, "value": v or 0.0, "remove": v is None}
                             for k, v in ops.items()]}],
        "validate_only": validate_only})
    return response.entries[0]


def describe(client: RawClient, components: list[tuple[str, int, str | None]],
             strict: bool = False, version: int = 1) -> Any:
    return client.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, version, {
        "components": [{"entity_type": t, "match_type": m, "match": n} for t, m, n in components],
        "strict": strict})


def as_dict(response: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity):
            {v.key: v.value for v in entry.values} for entry in response.entries}


def test_alter_and_describe_round_trip_with_defaults_and_restart(
        quota_broker: EmbeddedBroker) -> None:
    client = RawClient(quota_broker.bootstrap)
    assert alter(client, {"user": "alice"}, {"producer_byte_rate": 1024},
                 validate_only=True).error_code == 0
    assert as_dict(describe(client, [])) == {}  # validate_only wrote nothing
    for entity, ops in [({"user": "alice"}, {"producer_byte_rate": 1024}),
                        ({"user": None}, {"consumer_byte_rate": 2048}),
                        ({"user": "alice", "client-id": None}, {"request_percentage": 50.5}),
                        ({"client-id": "app"}, {"controller_mutation_rate": 10})]:
        assert alter(client, entity, ops, version=0).error_code == 0
    everything = as_dict(describe(client, []))
    assert everything == {
        (("client-id", None), ("user", "alice")): {"request_percentage": 50.5},
        (("client-id", "app"),): {"controller_mutation_rate": 10.0},
        (("user", None),): {"consumer_byte_rate": 2048.0},
        (("user", "alice"),): {"producer_byte_rate": 1024.0}}
    # match types: exact name, default, any specified name; strict excludes other types
    assert as_dict(describe(client, [("user", 0, "alice")])).keys() == {
        (("client-id", None), ("user", "alice")), (("user", "alice"),)}
    assert as_dict(describe(client, [("user", 0, "alice")], strict=True)).keys() == {
        (("user", "alice"),)}
    assert as_dict(describe(client, [("user", 1, None)])).keys() == {(("user", None),)}
    # "any specified name" is any entity naming the type, the default too (Kafka's KRaft image)
    assert as_dict(describe(client, [("user", 2, None)], strict=True)).keys() == {
        (("user", "alice"),), (("user", None),)}
    client.close()
    quota_broker.restart()
    client = RawClient(quota_broker.bootstrap)
    assert as_dict(describe(client, [], version=0)) == everything
    assert alter(client, {"user": "alice"}, {"producer_byte_rate": None}).error_code == 0
    assert (("user", "alice"),) not in as_dict(describe(client, []))
    client.close()


def test_invalid_entities_keys_and_filters_are_invalid_request(
        quota_broker: EmbeddedBroker) -> None:
    client = RawClient(quota_broker.bootstrap)
    invalid = 42
    for entity, ops, message in [
            ({"host": "1.2.3.4"}, {"producer_byte_rate": 1},
             "Unhandled client quota entity type: host"),
            # ip entities: Kafka 4.4's answers (compared on the wire)
            ({"ip": "1.2.3.4"}, {"producer_byte_rate": 1},
             "Invalid configuration key producer_byte_rate"),
            ({"user": "a"}, {"connection_creation_rate": 1},
             "Invalid configuration key connection_creation_rate"),
            ({"ip": "1.2.3.4", "user": "a"}, {"connection_creation_rate": 1},
             "Invalid quota entity combination, IP entity shouldnot be combined with User "
             "or ClientId"),
            ({"ip": ""}, {"connection_creation_rate": 1}, "Empty ip not supported"),
            ({"ip": "1.2.3.4"}, {"connection_creation_rate": 3e9},
             "Proposed value for connection_creation_rate is too large for an INT."),
            ({"ip": "1.2.3.4"}, {"connection_creation_rate": 2.5},
             "connection_creation_rate cannot be a fractional value."),
            ({"ip": "not_an_ip"}, {"connection_creation_rate": 1},
             "not_an_ip is not a valid IP or resolvable host. (strom takes IP addresses "
             "only: host names are not resolved)"),
            ({"user": ""}, {"producer_byte_rate": 1}, "Empty user not supported"),
            ({"user": "a"}, {"no_such_quota": 1}, "Invalid configuration key no_such_quota"),
            ({"user": "a"}, {"producer_byte_rate": 1.5},
             "producer_byte_rate cannot be a fractional value."),
            ({"user": "a"}, {"request_percentage": -1},
             "Quota request_percentage must be greater than 0"),
            ({}, {"producer_byte_rate": 1}, "Invalid empty client quota entity")]:
        result = alter(client, entity, ops)
        assert (result.error_code, result.error_message) == (invalid, message)
    # removing a key that is not set is no error
    assert alter(client, {"user": "a"}, {"producer_byte_rate": None}).error_code == 0
    twice = describe(client, [("user", 0, "a"), ("user", 1, None)])
    assert (twice.error_code, twice.error_message) == (
        invalid, "Entity type user cannot appear more than once in the filter.")
    assert describe(client, [("user", 1, "a")]).error_code == invalid
    assert describe(client, [("user", 0, None)]).error_code == invalid
    unknown = describe(client, [("topic", 0, "a")])
    assert (unknown.error_code, unknown.error_message) == (35, "Unsupported entity type topic")
    mixed = describe(client, [("ip", 2, None), ("user", 2, None)])
    assert (mixed.error_code, mixed.error_message) == (
        invalid, "Invalid entity filter component combination. IP filter component should "
        "not be used with user or clientId filter component.")
    assert as_dict(describe(client, [])) == {}
    client.close()


def test_ip_quotas_round_trip(quota_broker: EmbeddedBroker) -> None:
    client = RawClient(quota_broker.bootstrap)
    for entity, rate in (({"ip": "10.0.0.1"}, 10), ({"ip": None}, 50), ({"ip": "::1"}, 7)):
        assert alter(client, entity, {"connection_creation_rate": rate}).error_code == 0
    assert alter(client, {"user": "u"}, {"producer_byte_rate": 1024}).error_code == 0
    ips = {(("ip", "10.0.0.1"),): {"connection_creation_rate": 10.0},
           (("ip", None),): {"connection_creation_rate": 50.0},
           (("ip", "::1"),): {"connection_creation_rate": 7.0}}
    assert as_dict(describe(client, [("ip", 2, None)])) == ips
    assert as_dict(describe(client, [("ip", 1, None)])) == {(("ip", None),): {
        "connection_creation_rate": 50.0}}
    client.close()
    quota_broker.restart()
    client = RawClient(quota_broker.bootstrap)
    assert as_dict(describe(client, [("ip", 0, "::1")])) == {(("ip", "::1"),): {
        "connection_creation_rate": 7.0}}
    assert alter(client, {"ip": "::1"}, {"connection_creation_rate": None}).error_code == 0
    assert as_dict(describe(client, [("ip", 0, "::1")])) == {}
    client.close()


def test_precedence_is_kafkas_eight_entities_in_order() -> None:
    order = [
        (("client-id", "c"), ("user", "u")), (("client-id", None), ("user", "u")),
        (("user", "u"),), (("client-id", "c"), ("user", None)),
        (("client-id", None), ("user", None)), (("user", None),),
        (("client-id", "c"),), (("client-id", None),)]
    quotas = {entity: {"producer_byte_rate": float(i)} for i, entity in enumerate(order)}
    meters = [("u", "c"), ("u", "c"), ("u", ""), ("u", "c"), ("u", "c"), ("u", ""),
              ("", "c"), ("", "c")]
    for i, entity in enumerate(order):
        assert resolve(quotas, "producer_byte_rate", "u", "c") == (float(i), meters[i])
        del quotas[entity]
    assert resolve(quotas, "producer_byte_rate", "u", "c") is None


def test_producer_limited_to_1_mb_per_s_gets_about_1_mb_per_s(
        short_window_broker: EmbeddedBroker) -> None:
    quota_broker = short_window_broker
    client = RawClient(quota_broker.bootstrap)
    assert alter(client, {"client-id": "slow"}, {"producer_byte_rate": MB}).error_code == 0
    client.close()
    throttles: list[int] = []

    def stats(text: str) -> None:
        import json
        broker_stats = json.loads(text)["brokers"]
        throttles.extend(int(b["throttle"]["max"]) for b in broker_stats.values()
                         if b.get("throttle", {}).get("max"))

    producer = Producer({"bootstrap.servers": quota_broker.bootstrap, "client.id": "slow",
                         "linger.ms": 5, "statistics.interval.ms": 200,
                         "stats_cb": stats, "throttle_cb": lambda e: throttles.append(
                             int(e.throttle_time * 1000))})
    value = b"x" * 10_000
    delivered = [0]

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            delivered[0] += len(msg.value())

    def produce_for(seconds: float) -> tuple[int, float]:
        start_bytes, start = delivered[0], time.monotonic()
        while time.monotonic() - start < seconds:
            try:
                producer.produce("quota-topic", value, on_delivery=on_delivery)
            except BufferError:
                producer.poll(0.05)
            producer.poll(0)
        return delivered[0] - start_bytes, time.monotonic() - start

    produce_for(3)  # the first burst
    sent, elapsed = produce_for(5)
    # What is still queued would go at the quota's pace (tens of seconds) and is not measured.
    producer.purge()
    producer.flush(10)
    rate = sent / elapsed
    print(f"\nproducer under a 1 MB/s quota: {rate / MB:.2f} MB/s over {elapsed:.1f} s, "
          f"max throttle_time_ms seen {max(throttles, default=0)}")
    assert 0.6 * MB <= rate <= 1.4 * MB
    assert throttles, "the client never saw throttle_time_ms"


def test_consumer_byte_rate_quota_limits_a_fetching_consumer(
        short_window_broker: EmbeddedBroker) -> None:
    quota_broker = short_window_broker
    producer = Producer({"bootstrap.servers": quota_broker.bootstrap, "linger.ms": 20})
    for _ in range(3000):
        producer.produce("fetch-quota", b"y" * 10_000)
        producer.poll(0)
    producer.flush(30)
    client = RawClient(quota_broker.bootstrap)
    assert alter(client, {"client-id": None}, {"consumer_byte_rate": MB}).error_code == 0
    client.close()
    consumer = Consumer({"bootstrap.servers": quota_broker.bootstrap, "group.id": "q",
                         "client.id": "reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition("fetch-quota", 0, OFFSET_BEGINNING)])
    received, start = 0, time.monotonic()
    while time.monotonic() - start < 6:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            received += len(msg.value())
    consumer.close()
    rate = received / (time.monotonic() - start)
    print(f"\nconsumer under a 1 MB/s default-client quota: {rate / MB:.2f} MB/s over 6 s "
          "(30 MB available)")
    assert 0.4 * MB <= rate <= 1.6 * MB


def create_topics(client: RawClient, version: int, topics: dict[str, int]) -> Any:
    return client.call(ApiKey.CREATE_TOPICS, version, {"topics": [
        {"name": name, "num_partitions": n, "replication_factor": 1, "assignments": [],
         "configs": []} for name, n in topics.items()], "timeout_ms": 1000,
        "validate_only": False})


def test_controller_mutation_rate_refuses_in_strict_versions_and_throttles_older_ones(
        quota_broker: EmbeddedBroker) -> None:
    client = RawClient(quota_broker.bootstrap)  # client id "raw"
    assert alter(client, {"client-id": "raw"}, {"controller_mutation_rate": 1}).error_code == 0
    # The bucket holds rate x 11 windows = 11 mutations: a 12-partition topic is accepted
    # (it is not refused once started) and leaves the quota exceeded by 1, so the next topic
    # in the same request (v6+: strict) gets THROTTLING_QUOTA_EXCEEDED and the time until
    # the bucket is back to 0: 1 mutation at 1/s.
    started = time.monotonic()
    response = create_topics(client, 7, {"big": 12, "next": 1})
    errors = {t.name: t.error_code for t in response.topics}
    assert errors == {"big": 0, "next": 89}
    assert 900 <= response.throttle_time_ms <= 1000
    # The connection was muted for the throttle time (KIP-219): the next request waits.
    assert create_topics(client, 7, {"later": 1}).topics[0].error_code in (0, 89)
    assert time.monotonic() - started >= response.throttle_time_ms / 1000 * 0.9
    # v5 is permissive: the topic is created and only the throttle time tells.
    time.sleep(1.5)
    permissive = create_topics(client, 5, {"more": 5})
    assert permissive.topics[0].error_code == 0 and permissive.throttle_time_ms > 0
    client.close()


def test_request_percentage_throttles_and_old_versions_are_held_back(
        quota_broker: EmbeddedBroker) -> None:
    client = RawClient(quota_broker.bootstrap)
    assert alter(client, {"client-id": "raw"}, {"request_percentage": 0.001}).error_code == 0
    throttles = []
    for _ in range(5):
        throttles.append(client.call(ApiKey.METADATA, 12, {
            "topics": None, "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}).throttle_time_ms)
    # Kafka bounds a request-time throttle by one quota window (1 s).
    assert max(throttles) > 0 and max(throttles) <= 1000
    time.sleep(1.1)  # the mute of the last response is over
    started = time.monotonic()
    old = client.call(ApiKey.METADATA, 5, {"topics": None, "allow_auto_topic_creation": False})
    waited = time.monotonic() - started
    # Metadata v5 predates KIP-219: the broker holds the response back instead.
    assert old.throttle_time_ms > 0 and waited >= old.throttle_time_ms / 1000 * 0.9
    client.close()


def test_kafka_python_producer_sees_the_throttle_time(
        short_window_broker: EmbeddedBroker) -> None:
    from kafka import KafkaProducer

    client = RawClient(short_window_broker.bootstrap)
    assert alter(client, {"user": None, "client-id": None},
                 {"producer_byte_rate": 200_000}).error_code == 0
    client.close()
    producer = KafkaProducer(bootstrap_servers=short_window_broker.bootstrap,
                             client_id="kp", linger_ms=5)
    producer.send("kp-quota", b"warm-up").get(10)
    started = time.monotonic()
    sent = 0
    for _ in range(120):  # 1.2 MB: about 6 s at 200 kB/s
        producer.send("kp-quota", b"z" * 10_000)
        sent += 10_000
    producer.flush(60)
    elapsed = time.monotonic() - started
    metrics = producer.metrics()["producer-metrics"]  # kafka-python: throttle-time-max
    producer.close()
    print(f"\nkafka-python under a 200 kB/s default quota: {sent / elapsed / 1000:.0f} kB/s, "
          f"throttle-time-max {metrics['throttle-time-max']:.0f} ms")
    assert metrics["throttle-time-max"] > 0
    assert sent / elapsed <= 2 * 200_000


def test_follower_fetches_are_exempt_from_the_consumer_quota(
        quota_broker: EmbeddedBroker) -> None:
    producer = Producer({"bootstrap.servers": quota_broker.bootstrap})
    producer.produce("replicated", b"r" * 100_000)
    producer.flush(10)
    client = RawClient(quota_broker.bootstrap)
    assert alter(client, {"client-id": None}, {"consumer_byte_rate": 1000}).error_code == 0

    def fetch_throttle(replica_id: int) -> int:
        return int(client.call(ApiKey.FETCH, 12, {
            "replica_id": replica_id, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": "replicated", "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                 "last_fetched_epoch": -1, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}).throttle_time_ms)

    assert [fetch_throttle(0) for _ in range(3)] == [0, 0, 0]  # a follower (replica 0)
    assert fetch_throttle(-1) > 0  # 100 kB against 1 kB/s: a consumer is throttled
    client.close()
