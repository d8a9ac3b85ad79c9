"""Admin requests that cannot stop a broker: Kafka's per-request bounds on CreateTopics /
CreatePartitions and the per-broker partition bound, with real clients (confluent-kafka,
kafka-python, the strom CLI) against a real broker, which keeps serving everyone."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.admin import NewPartitions as KNewPartitions
from kafka.admin import NewTopic as KNewTopic
from kafka.errors import PolicyViolationError as KPolicyViolation

from strom.testing import EmbeddedBroker

POLICY_VIOLATION = 44
PER_REQUEST = "Excessively large number of partitions per request."
ADDITIONAL = "Excessively large number of additional partitions per request."
RECORDS = "Unable to perform excessively large batch operation."


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("existing", 2, 1)])["existing"].result(30)
        yield b


def refusal(future: object) -> tuple[int, str]:
    with pytest.raises(KafkaException) as caught:
        future.result(60)  # type: ignore[attr-defined]
    error = caught.value.args[0]
    return error.code(), error.str()


def still_serving(broker: EmbeddedBroker) -> None:
    """Metadata answers, nothing was created, and a producer gets its delivery."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = admin.list_topics(timeout=10).topics
    assert {t for t in topics if not t.startswith("__")} == {"existing"}
    assert len(topics["existing"].partitions) == 2
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("existing", b"still here", partition=1)
    assert producer.flush(30) == 0


def test_create_topics_above_10000_partitions_is_refused_whole(broker: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert refusal(admin.create_topics([NewTopic("huge", 100_000, 1)])["huge"]) == (
        POLICY_VIOLATION, PER_REQUEST)
    futures = admin.create_topics([NewTopic("small", 1, 1), NewTopic("a", 5000, 1),
                                   NewTopic("b", 5001, 1)])
    assert {name: refusal(f) for name, f in futures.items()} == {
        name: (POLICY_VIOLATION, PER_REQUEST) for name in ("small", "a", "b")}
    futures = admin.create_topics([NewTopic("a", 5000, 1), NewTopic("b", 5001, 1)],
                                  validate_only=True)
    assert {refusal(f) for f in futures.values()} == {(POLICY_VIOLATION, PER_REQUEST)}
    # one topic of exactly 10,000 partitions passes that bound but is 10,001 metadata
    # records (Kafka 4.4 answers the same); 9,999 fit
    assert refusal(admin.create_topics([NewTopic("ten-k", 10_000, 1)], validate_only=True)[
        "ten-k"]) == (POLICY_VIOLATION, RECORDS)
    admin.create_topics([NewTopic("fits", 9_999, 1)], validate_only=True)["fits"].result(60)
    still_serving(broker)


def test_create_partitions_to_a_million_is_refused_and_the_broker_serves_on(
        broker: EmbeddedBroker) -> None:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=60000)
    try:
        began = time.monotonic()
        with pytest.raises(KPolicyViolation, match=ADDITIONAL):
            client.create_partitions({"existing": KNewPartitions(1_000_000)})
        with pytest.raises(KPolicyViolation, match=ADDITIONAL):
            client.create_partitions({"existing": KNewPartitions(10_003)}, validate_only=True)
        with pytest.raises(KPolicyViolation, match=PER_REQUEST):
            client.create_topics([KNewTopic("most", 2**31 - 1, 1),
                                  KNewTopic("more", 2**31 - 1, 1)])
        assert time.monotonic() - began < 30  # refused before anything was placed
    finally:
        client.close()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert refusal(admin.create_partitions([NewPartitions("existing", 20_000)])["existing"]) \
        == (POLICY_VIOLATION, ADDITIONAL)
    # 10,000 more is within the bound (validated only: nothing is created)
    admin.create_partitions([NewPartitions("existing", 10_002)],
                            validate_only=True)["existing"].result(60)
    still_serving(broker)


def test_the_cli_says_what_to_do_instead(broker: EmbeddedBroker) -> None:
    def strom(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "strom", *args,
                               "--bootstrap-server", broker.bootstrap],
                              capture_output=True, text=True, timeout=120)

    created = strom("topics", "create", "wide", "--partitions", "20000")
    assert created.returncode == 1
    assert f"POLICY_VIOLATION (44): {PER_REQUEST}" in created.stderr
    assert "at most 10,000 partitions" in created.stderr
    grown = strom("topics", "alter", "existing", "--partitions", "1000000")
    assert grown.returncode == 1
    assert ADDITIONAL in grown.stderr and "grow the topic in steps" in grown.stderr
    still_serving(broker)


def test_a_broker_holds_no_more_than_max_broker_partitions() -> None:
    with EmbeddedBroker(config={"max.broker.partitions": 30}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("t", 20, 1)])["t"].result(30)
        code, message = refusal(admin.create_topics([NewTopic("u", 11, 1)])["u"])
        assert code == POLICY_VIOLATION and "max.broker.partitions=30" in message
        code, message = refusal(admin.create_partitions([NewPartitions("t", 31)])["t"])
        assert code == POLICY_VIOLATION and "max.broker.partitions=30" in message
        admin.create_topics([NewTopic("u", 10, 1)])["u"].result(30)  # exactly the bound
        # The group coordinator's own topic is not refused (its 50 partitions are exempt).
        producer = Producer({"bootstrap.servers": b.bootstrap})
        producer.produce("u", b"x")
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["u"])
        deadline = time.monotonic() + 60
        got = None
        while got is None and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                got = message.value()
        consumer.close()
        assert got == b"x"
        topics = admin.list_topics(timeout=10).topics
        assert len(topics["t"].partitions) == 20 and len(topics["u"].partitions) == 10
