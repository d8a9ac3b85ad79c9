"""Real clients over every listener type: confluent-kafka (librdkafka), kafka-python and
aiokafka produce and consume over SSL, SASL_PLAINTEXT and SASL_SSL with PLAIN and SCRAM;
wrong passwords and unknown users are refused with each client's authentication error;
untrusted certificates and plaintext clients on a TLS port fail while others are served."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import pytest

from tests.broker.security.conftest import PLAIN_USERS, SCRAM_PASSWORD, SCRAM_USER, SecureBroker

# (listener, mechanism or None for SSL)
CASES = [
    ("SSL", None),
    ("SASL_PLAINTEXT", "PLAIN"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
    ("SASL_SSL", "SCRAM-SHA-512"),
    ("SASL_SSL", "PLAIN"),
]


def _credentials(mechanism: str | None, good: bool = True,
                 user: str | None = None) -> tuple[str, str]:
    if mechanism == "PLAIN":
        name = user or "alice"
        return name, PLAIN_USERS.get(name, "x") if good else "wrong-pw"
    return user or SCRAM_USER, SCRAM_PASSWORD if good else "wrong-pw"


def _protocol(listener: str) -> str:
    return "SSL" if listener == "MTLS" else listener


# Each client's names for: bootstrap, security protocol, SASL mechanism, user, password.
_KEYS = {
    "confluent": ("bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.username",
                  "sasl.password"),
    "python": ("bootstrap_servers", "security_protocol", "sasl_mechanism",
               "sasl_plain_username", "sasl_plain_password"),
}


def _conf(keys: tuple[str, ...], secure: SecureBroker, listener: str, mechanism: str | None,
          good: bool, user: str | None) -> dict[str, Any]:
    conf: dict[str, Any] = {keys[0]: secure.bootstrap(listener), keys[1]: _protocol(listener)}
    if mechanism is not None:
        name, password = _credentials(mechanism, good, user)
        conf.update({keys[2]: mechanism, keys[3]: name, keys[4]: password})
    return conf


def confluent_conf(secure: SecureBroker, listener: str, mechanism: str | None,
                   good: bool = True, user: str | None = None) -> dict[str, Any]:
    conf = _conf(_KEYS["confluent"], secure, listener, mechanism, good, user)
    if "SSL" in _protocol(listener):
        conf["ssl.ca.location"] = str(secure.certs.ca)
    return conf


def kafka_python_conf(secure: SecureBroker, listener: str, mechanism: str | None,
                      good: bool = True, user: str | None = None) -> dict[str, Any]:
    conf = _conf(_KEYS["python"], secure, listener, mechanism, good, user)
    if "SSL" in _protocol(listener):
        conf["ssl_cafile"] = str(secure.certs.ca)
    return conf


def aiokafka_conf(secure: SecureBroker, listener: str, mechanism: str | None,
                  good: bool = True, user: str | None = None) -> dict[str, Any]:
    from aiokafka.helpers import create_ssl_context

    conf = _conf(_KEYS["python"], secure, listener, mechanism, good, user)
    if "SSL" in _protocol(listener):
        conf["ssl_context"] = create_ssl_context(cafile=str(secure.certs.ca))
    return conf


def _topic() -> str:
    return f"sec-{uuid.uuid4().hex[:10]}"


def confluent_roundtrip(conf: dict[str, Any], topic: str, values: list[bytes]) -> list[bytes]:
    from confluent_kafka import Consumer, Producer

    producer = Producer(conf)
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(20) == 0
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.assign([__import__("confluent_kafka").TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    try:
        for _ in range(100):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            if len(got) == len(values):
                break
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize(("listener", "mechanism"), CASES)
def test_confluent_kafka_produces_and_consumes(secure: SecureBroker, listener: str,
                                               mechanism: str | None) -> None:
    topic = _topic()
    values = [f"v{i}".encode() for i in range(20)]
    assert confluent_roundtrip(confluent_conf(secure, listener, mechanism), topic,
                               values) == values


def kafka_python_roundtrip(conf: dict[str, Any], topic: str,
                           values: list[bytes]) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(**conf)
    for value in values:
        producer.send(topic, value)
    producer.flush(20)
    producer.close()
    consumer = KafkaConsumer(**conf, consumer_timeout_ms=10000)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got = []
    for record in consumer:
        got.append(record.value)
        if len(got) == len(values):
            break
    consumer.close()
    return got


@pytest.mark.parametrize(("listener", "mechanism"), CASES)
def test_kafka_python_produces_and_consumes(secure: SecureBroker, listener: str,
                                           mechanism: str | None) -> None:
    values = [f"k{i}".encode() for i in range(10)]
    assert kafka_python_roundtrip(kafka_python_conf(secure, listener, mechanism), _topic(),
                                  values) == values


def aiokafka_roundtrip(conf: dict[str, Any], topic: str, values: list[bytes]) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**conf)
        await producer.start()
        try:
            for value in values:
                await producer.send_and_wait(topic, value)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**conf, auto_offset_reset="earliest")
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got: list[bytes] = []
            while len(got) < len(values):
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 20)
                got += [r.value for records in batch.values() for r in records]
            return got
        finally:
            await consumer.stop()

    return asyncio.run(run())


@pytest.mark.parametrize(("listener", "mechanism"), CASES)
def test_aiokafka_produces_and_consumes(secure: SecureBroker, listener: str,
                                        mechanism: str | None) -> None:
    values = [f"a{i}".encode() for i in range(10)]
    assert aiokafka_roundtrip(aiokafka_conf(secure, listener, mechanism), _topic(),
                              values) == values


def test_fetch_through_tls_serves_large_regions(secure: SecureBroker) -> None:
    """Regions above the sendfile threshold go through TLS by chunked reads, not sendfile."""
    values = [bytes([i]) * 100_000 for i in range(12)]  # ~1.2 MB in one fetch
    conf = confluent_conf(secure, "SASL_SSL", "SCRAM-SHA-256")
    got = confluent_roundtrip({**conf, "batch.size": 1_000_000, "linger.ms": 50}, _topic(),
                              values)
    assert got == values


REFUSED = [("SASL_PLAINTEXT", "PLAIN", None), ("SASL_PLAINTEXT", "SCRAM-SHA-256", None),
           ("SASL_SSL", "SCRAM-SHA-512", "nobody"), ("SASL_SSL", "PLAIN", "nobody")]


def _confluent_errors(conf: dict[str, Any], wanted: set[int], seconds: float = 5) -> list[Any]:
    """The errors librdkafka reports (error_cb) while trying to reach the broker."""
    from confluent_kafka import Producer

    errors: list[Any] = []
    producer = Producer({**conf, "error_cb": errors.append})
    producer.produce("any-topic", b"x")
    for _ in range(int(seconds * 10)):
        producer.poll(0.1)
        if any(e.code() in wanted for e in errors):
            break
    producer.purge()
    producer.flush(1)
    return errors


def _confluent_auth_error(conf: dict[str, Any]) -> Any:
    from confluent_kafka import KafkaError

    errors = _confluent_errors(conf, {KafkaError._AUTHENTICATION})
    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth, errors
    return auth[0]


@pytest.mark.parametrize(("listener", "mechanism", "user"), REFUSED)
def test_confluent_kafka_wrong_password_or_unknown_user(secure: SecureBroker, listener: str,
                                                        mechanism: str, user: str | None
                                                        ) -> None:
    error = _confluent_auth_error(confluent_conf(secure, listener, mechanism, good=False,
                                                 user=user))
    assert "Authentication failed" in error.str()
    if mechanism == "PLAIN":
        assert "Invalid username or password" in error.str()
    else:
        assert f"invalid credentials with SASL mechanism {mechanism}" in error.str()


@pytest.mark.parametrize(("listener", "mechanism", "user"), REFUSED)
def test_kafka_python_wrong_password_or_unknown_user(secure: SecureBroker, listener: str,
                                                     mechanism: str, user: str | None,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    conf = kafka_python_conf(secure, listener, mechanism, good=False, user=user)
    with caplog.at_level(logging.ERROR, logger="kafka"), \
            pytest.raises(KafkaTimeoutError):
        KafkaProducer(**conf, max_block_ms=3000, request_timeout_ms=3000,
                      bootstrap_timeout_ms=3000)
    assert "Authentication failed" in caplog.text
    assert "SaslAuthenticationFailedError" in caplog.text


@pytest.mark.parametrize(("listener", "mechanism", "user"), REFUSED)
def test_aiokafka_wrong_password_or_unknown_user(secure: SecureBroker, listener: str,
                                                 mechanism: str, user: str | None,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError

    async def run() -> None:
        producer = AIOKafkaProducer(**aiokafka_conf(secure, listener, mechanism, good=False,
                                                    user=user))
        try:
            with pytest.raises(KafkaConnectionError):
                await producer.start()
        finally:
            await producer.stop()

    with caplog.at_level(logging.ERROR, logger="aiokafka"):
        asyncio.run(run())
    assert "[Error 58] SaslAuthenticationFailed: Authentication failed" in caplog.text


def test_untrusted_client_certificate_is_refused_others_served(secure: SecureBroker) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    certs = secure.certs
    refused = {KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}
    errors = _confluent_errors({**confluent_conf(secure, "MTLS", None),
                                "ssl.certificate.location": str(certs.rogue_cert),
                                "ssl.key.location": str(certs.rogue_key)}, refused)
    assert any(e.code() in refused for e in errors), errors
    # No certificate at all on the listener that requires one: refused too.
    errors = _confluent_errors(confluent_conf(secure, "MTLS", None), refused)
    assert any(e.code() in refused for e in errors), errors
    # A trusted client certificate is served.
    trusted = AdminClient({**confluent_conf(secure, "MTLS", None),
                           "ssl.certificate.location": str(certs.client_cert),
                           "ssl.key.location": str(certs.client_key)})
    metadata = trusted.list_topics(timeout=10)
    assert [b.port for b in metadata.brokers.values()] == [
        int(secure.bootstrap("MTLS").rsplit(":", 1)[1])]


def test_plaintext_client_on_the_tls_port_fails_while_another_is_served(
        secure: SecureBroker) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    good = AdminClient(confluent_conf(secure, "SSL", None))
    refused = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}
    errors = _confluent_errors({"bootstrap.servers": secure.bootstrap("SSL"),
                                "socket.timeout.ms": 2000}, refused)
    assert any(e.code() in refused for e in errors), errors
    assert good.list_topics(timeout=10).brokers


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL", "SASL_SSL"])
def test_metadata_advertises_the_listener_the_client_came_through(secure: SecureBroker,
                                                                  listener: str) -> None:
    from confluent_kafka.admin import AdminClient

    conf = confluent_conf(secure, listener, "SCRAM-SHA-256" if "SASL" in listener else None)
    metadata = AdminClient(conf).list_topics(timeout=10)
    host, port = secure.bootstrap(listener).rsplit(":", 1)
    assert [(b.host, b.port) for b in metadata.brokers.values()] == [(host, int(port))]
