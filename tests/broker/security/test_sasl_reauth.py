"""KIP-368 re-authentication: the session lifetime in SaslAuthenticate, re-authentication on a
live connection (same principal and mechanism only, at most once a second), and closing a
connection whose session ended; confluent-kafka and kafka-python re-authenticate by
themselves."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from strom.common.errors import error_class
from strom.protocol.versions import ApiKey
from strom.testing import EmbeddedBroker
from tests.broker.raw import RawClient
from tests.broker.security.conftest import JAAS, PLAIN_USERS
from tests.broker.security.test_sasl_wire import closed
from tests.broker.security.tokens import unsecured_token

LIFETIME_MS = 1500
REAUTHENTICATED = "re-authenticated as User:alice with PLAIN"
EXPIRED = "without re-authentication"


@pytest.fixture(scope="module")
def reauth() -> Iterator[EmbeddedBroker]:
    config = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER",
        "sasl.jaas.config": JAAS,
        "sasl.oauthbearer.unsecured.tokens.allowed": "true",
        "connections.max.reauth.ms": str(LIFETIME_MS),
        "listener.name.sasl_plaintext.oauthbearer.connections.max.reauth.ms": "60000",
    }
    with EmbeddedBroker(config, log_level="DEBUG") as broker:
        yield broker


def _code(name: str) -> int:
    return error_class(name).code


def _plain(user: str) -> bytes:
    return f"\x00{user}\x00{PLAIN_USERS[user]}".encode()


def _authenticate(client: RawClient, mechanism: str, token: bytes) -> Any:
    assert client.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism}).error_code == 0
    return client.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})


def _served(client: RawClient) -> bool:
    return bool(client.call(ApiKey.METADATA, 12, {"topics": []}).brokers)


def test_reauthentication_renews_the_session_and_expiry_closes(reauth: EmbeddedBroker) -> None:
    client = RawClient(reauth.bootstrap_of("SASL_PLAINTEXT"))
    auth = _authenticate(client, "PLAIN", _plain("alice"))
    assert (auth.error_code, auth.session_lifetime_ms) == (0, LIFETIME_MS)
    assert _served(client)
    time.sleep(1.0)
    again = _authenticate(client, "PLAIN", _plain("alice"))
    assert (again.error_code, again.session_lifetime_ms) == (0, LIFETIME_MS)
    time.sleep(1.0)  # 2 s after the first authentication: served thanks to the renewal
    assert _served(client)
    time.sleep(LIFETIME_MS / 1000)
    client.send_frame(client.header(ApiKey.METADATA, 12) + b"\x01\x00\x00")
    assert closed(client)
    assert EXPIRED in "".join(reauth.output)


def test_a_session_past_its_lifetime_may_still_reauthenticate(reauth: EmbeddedBroker) -> None:
    client = RawClient(reauth.bootstrap_of("SASL_PLAINTEXT"))
    assert _authenticate(client, "PLAIN", _plain("alice")).error_code == 0
    time.sleep(LIFETIME_MS / 1000 + 0.2)
    assert _authenticate(client, "PLAIN", _plain("alice")).error_code == 0
    assert _served(client)
    client.close()


def test_reauthentication_cannot_change_the_principal(reauth: EmbeddedBroker) -> None:
    client = RawClient(reauth.bootstrap_of("SASL_PLAINTEXT"))
    assert _authenticate(client, "PLAIN", _plain("alice")).error_code == 0
    refused = _authenticate(client, "PLAIN", _plain("admin"))
    assert refused.error_code == _code("SASL_AUTHENTICATION_FAILED")
    assert refused.error_message == ("Cannot change principals during re-authentication from "
                                     "User.alice: User.admin")
    assert closed(client)


def test_reauthentication_cannot_change_the_mechanism(reauth: EmbeddedBroker) -> None:
    client = RawClient(reauth.bootstrap_of("SASL_PLAINTEXT"))
    assert _authenticate(client, "PLAIN", _plain("alice")).error_code == 0
    token = f"n,,\x01auth=Bearer {unsecured_token('alice')}\x01\x01".encode()
    refused = _authenticate(client, "OAUTHBEARER", token)
    assert refused.error_code == _code("SASL_AUTHENTICATION_FAILED")
    assert refused.error_message == ("SASL mechanism 'OAUTHBEARER' requested by client is not "
                                     "supported for re-authentication of mechanism 'PLAIN'")
    assert closed(client)


def test_at_most_one_reauthentication_a_second(reauth: EmbeddedBroker) -> None:
    client = RawClient(reauth.bootstrap_of("SASL_PLAINTEXT"))
    assert _authenticate(client, "PLAIN", _plain("alice")).error_code == 0
    assert _authenticate(client, "PLAIN", _plain("alice")).error_code == 0
    too_soon = client.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert too_soon.error_code == _code("ILLEGAL_SASL_STATE")
    assert _served(client)  # the connection is kept
    client.close()


def test_token_expiry_bounds_the_session(reauth: EmbeddedBroker) -> None:
    """OAUTHBEARER's reauth limit is 60 s on this listener; a token valid 20 s wins."""
    client = RawClient(reauth.bootstrap_of("SASL_PLAINTEXT"))
    token = f"n,,\x01auth=Bearer {unsecured_token('erin', lifetime_s=20)}\x01\x01".encode()
    auth = _authenticate(client, "OAUTHBEARER", token)
    assert auth.error_code == 0 and 15_000 <= auth.session_lifetime_ms <= 20_000
    long_lived = RawClient(reauth.bootstrap_of("SASL_PLAINTEXT"))
    token = f"n,,\x01auth=Bearer {unsecured_token('erin', lifetime_s=600)}\x01\x01".encode()
    assert _authenticate(long_lived, "OAUTHBEARER", token).session_lifetime_ms == 60_000
    client.close()
    long_lived.close()


def _reauthentications(broker: EmbeddedBroker, since: int) -> int:
    return sum(REAUTHENTICATED in line for line in broker.output[since:])


def test_confluent_kafka_reauthenticates(reauth: EmbeddedBroker) -> None:
    from confluent_kafka import Producer

    errors: list[Any] = []
    since = len(reauth.output)
    producer = Producer({"bootstrap.servers": reauth.bootstrap_of("SASL_PLAINTEXT"),
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": "alice", "sasl.password": PLAIN_USERS["alice"],
                         "error_cb": errors.append})
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    delivered: list[Any] = []
    for i in range(25):
        producer.produce(topic, f"r{i}".encode(),
                         on_delivery=lambda err, msg: delivered.append(err))
        producer.poll(0)
        time.sleep(0.2)  # 5 s in all: more than three session lifetimes
    assert producer.flush(20) == 0
    assert delivered == [None] * 25 and not errors
    assert _reauthentications(reauth, since) >= 2
    assert not any(EXPIRED in line for line in reauth.output[since:])


def test_kafka_python_reauthenticates(reauth: EmbeddedBroker) -> None:
    from kafka import KafkaProducer

    since = len(reauth.output)
    producer = KafkaProducer(bootstrap_servers=reauth.bootstrap_of("SASL_PLAINTEXT"),
                             security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                             sasl_plain_username="alice",
                             sasl_plain_password=PLAIN_USERS["alice"])
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    for i in range(25):
        producer.send(topic, f"k{i}".encode()).get(10)
        time.sleep(0.2)
    producer.close()
    assert _reauthentications(reauth, since) >= 2
    assert not any(EXPIRED in line for line in reauth.output[since:])
