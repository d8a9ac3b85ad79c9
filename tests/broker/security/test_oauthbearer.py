"""SASL OAUTHBEARER (KIP-255 / RFC 7628) against signed JWTs: confluent-kafka (oauth_cb and
librdkafka's unsecured tokens), kafka-python and aiokafka (sasl_oauth_token_provider) over
SASL_PLAINTEXT and SASL_SSL; expired, badly signed and wrong-audience tokens refused with each
client's error; the invalid_token dance and the session lifetime on the wire."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.common.errors import error_class
from strom.protocol.versions import ApiKey
from strom.testing import EmbeddedBroker
from tests.broker.raw import RawClient
from tests.broker.security.certs import KEY_PASSWORD, Certs
from tests.broker.security.conftest import JAAS
from tests.broker.security.test_clients import (
    aiokafka_roundtrip,
    confluent_roundtrip,
    kafka_python_roundtrip,
)
from tests.broker.security.test_sasl_wire import closed as _closed
from tests.broker.security.tokens import AUDIENCE, ISSUER, Keys, make_keys, unsecured_token

INVALID_TOKEN = '{"status":"invalid_token"}'


class OAuthBroker:
    def __init__(self, broker: EmbeddedBroker, certs: Certs, keys: Keys) -> None:
        self.broker, self.certs, self.keys = broker, certs, keys

    def bootstrap(self, listener: str) -> str:
        return self.broker.bootstrap_of(listener)


def oauth_config(certs: Certs, keys: Keys) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
                     "SASL_SSL://127.0.0.1:0,UNSECURED://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                          "SASL_SSL:SASL_SSL,UNSECURED:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.location": str(certs.broker_keystore),
        "ssl.key.password": KEY_PASSWORD,
        "sasl.enabled.mechanisms": "OAUTHBEARER,PLAIN",
        "sasl.jaas.config": JAAS,
        "sasl.oauthbearer.jwks.endpoint.url": keys.jwks_url,
        "sasl.oauthbearer.public.keys.location": str(keys.pem),
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.expected.issuer": ISSUER,
        "listener.name.unsecured.oauthbearer.sasl.oauthbearer.unsecured.tokens.allowed": "true",
    }


@pytest.fixture(scope="module")
def oauth(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthBroker]:
    keys = make_keys(Path(tmp_path_factory.mktemp("jwt")))
    with EmbeddedBroker(oauth_config(certs, keys), log_level="INFO") as broker:
        yield OAuthBroker(broker, certs, keys)


def _topic() -> str:
    return f"oauth-{uuid.uuid4().hex[:10]}"


def _code(name: str) -> int:
    return error_class(name).code


# -- confluent-kafka ------------------------------------------------------------------------
def confluent_conf(oauth: OAuthBroker, listener: str, token: str) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": oauth.bootstrap(listener), "security.protocol": listener,
        "sasl.mechanism": "OAUTHBEARER",
        # librdkafka refuses an expired token itself: announce a future expiry so the
        # broker is the one that judges the token.
        "oauth_cb": lambda _config: (token, time.time() + 300)}
    if listener == "SASL_SSL":
        conf["ssl.ca.location"] = str(oauth.certs.ca)
    return conf


@pytest.mark.parametrize(("listener", "key"), [("SASL_PLAINTEXT", "rsa"), ("SASL_SSL", "ec")])
def test_confluent_kafka_with_a_signed_token(oauth: OAuthBroker, listener: str,
                                             key: str) -> None:
    values = [f"o{i}".encode() for i in range(10)]
    conf = confluent_conf(oauth, listener, oauth.keys.token(key=key))
    assert confluent_roundtrip(conf, _topic(), values) == values


def _bad_token(keys: Keys, reason: str) -> str:
    if reason == "expired":
        return keys.token(lifetime_s=-120)
    if reason == "signature":
        return keys.token(key="rogue")
    return keys.token(aud="someone-else")


BAD = ["expired", "signature", "audience"]


def _confluent_auth_error(conf: dict[str, Any]) -> Any:
    from confluent_kafka import KafkaError, Producer

    errors: list[Any] = []
    producer = Producer({**conf, "error_cb": errors.append})
    producer.produce("any-topic", b"x")
    for _ in range(50):
        producer.poll(0.1)
        if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            break
    producer.purge()
    producer.flush(1)
    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth, errors
    return auth[0]


@pytest.mark.parametrize("reason", BAD)
def test_confluent_kafka_bad_token_is_refused(oauth: OAuthBroker, reason: str) -> None:
    error = _confluent_auth_error(confluent_conf(oauth, "SASL_SSL",
                                                 _bad_token(oauth.keys, reason)))
    assert INVALID_TOKEN in error.str()


def test_confluent_kafka_unsecured_token_only_where_allowed(oauth: OAuthBroker) -> None:
    """librdkafka's own unsecured JWT (alg none): served on the listener that allows them,
    refused on the others."""
    def conf(listener: str) -> dict[str, Any]:
        return {"bootstrap.servers": oauth.bootstrap(listener),
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                "enable.sasl.oauthbearer.unsecure.jwt": True,
                "sasl.oauthbearer.config": "principal=carol"}

    values = [b"u1", b"u2"]
    assert confluent_roundtrip(conf("UNSECURED"), _topic(), values) == values
    assert INVALID_TOKEN in _confluent_auth_error(conf("SASL_PLAINTEXT")).str()


# -- kafka-python ---------------------------------------------------------------------------
def kafka_python_conf(oauth: OAuthBroker, listener: str, token: str) -> dict[str, Any]:
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        def token(self) -> str:
            return token

    conf: dict[str, Any] = {"bootstrap_servers": oauth.bootstrap(listener),
                            "security_protocol": listener, "sasl_mechanism": "OAUTHBEARER",
                            "sasl_oauth_token_provider": Provider()}
    if listener == "SASL_SSL":
        conf["ssl_cafile"] = str(oauth.certs.ca)
    return conf


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_kafka_python_with_a_signed_token(oauth: OAuthBroker, listener: str) -> None:
    values = [f"p{i}".encode() for i in range(5)]
    conf = kafka_python_conf(oauth, listener, oauth.keys.token())
    assert kafka_python_roundtrip(conf, _topic(), values) == values


@pytest.mark.parametrize("reason", BAD)
def test_kafka_python_bad_token_is_refused(oauth: OAuthBroker, reason: str,
                                           caplog: pytest.LogCaptureFixture) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    conf = kafka_python_conf(oauth, "SASL_PLAINTEXT", _bad_token(oauth.keys, reason))
    with caplog.at_level(logging.ERROR, logger="kafka"), pytest.raises(KafkaTimeoutError):
        KafkaProducer(**conf, max_block_ms=3000, request_timeout_ms=3000,
                      bootstrap_timeout_ms=3000)
    assert "SaslAuthenticationFailedError" in caplog.text
    assert INVALID_TOKEN in caplog.text


# -- aiokafka -------------------------------------------------------------------------------
def aiokafka_conf(oauth: OAuthBroker, listener: str, token: str) -> dict[str, Any]:
    from aiokafka.abc import AbstractTokenProvider
    from aiokafka.helpers import create_ssl_context

    class Provider(AbstractTokenProvider):
        async def token(self) -> str:
            return token

    conf: dict[str, Any] = {"bootstrap_servers": oauth.bootstrap(listener),
                            "security_protocol": listener, "sasl_mechanism": "OAUTHBEARER",
                            "sasl_oauth_token_provider": Provider()}
    if listener == "SASL_SSL":
        conf["ssl_context"] = create_ssl_context(cafile=str(oauth.certs.ca))
    return conf


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_aiokafka_with_a_signed_token(oauth: OAuthBroker, listener: str) -> None:
    values = [f"a{i}".encode() for i in range(5)]
    conf = aiokafka_conf(oauth, listener, oauth.keys.token(key="ec"))
    assert aiokafka_roundtrip(conf, _topic(), values) == values


@pytest.mark.parametrize("reason", BAD)
def test_aiokafka_bad_token_is_refused(oauth: OAuthBroker, reason: str) -> None:
    """aiokafka takes the invalid_token challenge for success and goes on with its next
    request, which the broker refuses by closing the connection (as Kafka does)."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError

    async def run() -> None:
        producer = AIOKafkaProducer(**aiokafka_conf(oauth, "SASL_SSL",
                                                    _bad_token(oauth.keys, reason)),
                                    request_timeout_ms=5000)
        try:
            with pytest.raises(KafkaConnectionError):
                await producer.start()
        finally:
            await producer.stop()

    asyncio.run(run())


# -- on the wire ----------------------------------------------------------------------------
def _initial(token: str, authzid: str = "") -> bytes:
    gs2 = f"n,a={authzid}," if authzid else "n,,"
    return f"{gs2}\x01auth=Bearer {token}\x01\x01".encode()


def _handshake(oauth: OAuthBroker, listener: str = "SASL_PLAINTEXT") -> RawClient:
    client = RawClient(oauth.bootstrap(listener))
    assert client.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "OAUTHBEARER"}).error_code == 0
    return client


def test_invalid_token_dance_on_the_wire(oauth: OAuthBroker) -> None:
    client = _handshake(oauth)
    first = client.call(ApiKey.SASL_AUTHENTICATE, 2,
                        {"auth_bytes": _initial(oauth.keys.token(key="rogue"))})
    assert (first.error_code, bytes(first.auth_bytes)) == (0, INVALID_TOKEN.encode())
    started = time.monotonic()
    final = client.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\x01"})
    assert time.monotonic() - started >= 0.09  # connection.failed.authentication.delay.ms
    assert final.error_code == _code("SASL_AUTHENTICATION_FAILED")
    assert final.error_message == INVALID_TOKEN
    assert _closed(client)
    log = "".join(oauth.broker.output)
    assert "Failed authentication with" in log and "signature does not verify" in log


def test_valid_token_session_lifetime_is_its_expiry(oauth: OAuthBroker) -> None:
    client = _handshake(oauth)
    auth = client.call(ApiKey.SASL_AUTHENTICATE, 2,
                       {"auth_bytes": _initial(oauth.keys.token(lifetime_s=120))})
    assert (auth.error_code, bytes(auth.auth_bytes)) == (0, b"")
    assert 110_000 <= auth.session_lifetime_ms <= 120_000
    assert client.call(ApiKey.METADATA, 12, {"topics": []}).brokers
    client.close()


@pytest.mark.parametrize(("message", "expected"), [
    (b"n,,\x01auth=Basic abc\x01\x01", "invalid credentials with SASL mechanism OAUTHBEARER"),
    (b"not an initial response", "invalid credentials with SASL mechanism OAUTHBEARER"),
    (None, "Client requested an authorization id (bob) that is different from the token's "
           "principal name (alice)"),
])
def test_malformed_or_mismatched_initial_response_is_refused(
        oauth: OAuthBroker, message: bytes | None, expected: str) -> None:
    client = _handshake(oauth)
    auth_bytes = message if message is not None else _initial(oauth.keys.token(), "bob")
    auth = client.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": auth_bytes})
    assert auth.error_code == _code("SASL_AUTHENTICATION_FAILED")
    assert expected in auth.error_message
    assert _closed(client)


def test_unsecured_token_on_the_wire(oauth: OAuthBroker) -> None:
    refused = _handshake(oauth)
    first = refused.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": _initial(unsecured_token())})
    assert bytes(first.auth_bytes) == INVALID_TOKEN.encode()
    refused.close()
    allowed = _handshake(oauth, "UNSECURED")
    auth = allowed.call(ApiKey.SASL_AUTHENTICATE, 2,
                        {"auth_bytes": _initial(unsecured_token("dave"))})
    assert (auth.error_code, bytes(auth.auth_bytes)) == (0, b"")
    allowed.close()


def test_oauthbearer_without_keys_stops_the_broker(certs: Certs) -> None:
    config = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
              "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,"
                                                "SASL_PLAINTEXT:SASL_PLAINTEXT",
              "inter.broker.listener.name": "PLAINTEXT",
              "sasl.enabled.mechanisms": "OAUTHBEARER"}
    with pytest.raises(RuntimeError, match=r"sasl\.oauthbearer\.jwks\.endpoint\.url"):
        EmbeddedBroker(config).start()


# -- strom's own client -----------------------------------------------------------------------
@pytest.mark.parametrize("good", [True, False])
def test_strom_client_with_a_token_callable(oauth: OAuthBroker, good: bool) -> None:
    from strom.client import AdminClient
    from strom.client.security import ClientSecurity, client_context

    token = oauth.keys.token() if good else oauth.keys.token(key="rogue")

    async def fetch_token() -> str:
        return token

    security = ClientSecurity("SASL_SSL", client_context(ca=str(oauth.certs.ca)),
                              "OAUTHBEARER", oauth_token=fetch_token)

    async def run() -> list[str]:
        async with AdminClient(oauth.bootstrap("SASL_SSL"), security=security) as admin:
            return await admin.list_topics()

    if good:
        assert isinstance(asyncio.run(run()), list)
    else:
        with pytest.raises(error_class("SASL_AUTHENTICATION_FAILED"), match="invalid_token"):
            asyncio.run(run())
