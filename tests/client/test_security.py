"""strom's own client over TLS and SASL against strom's secure listeners: the admin client with
SCRAM over SASL_SSL, producer and fetcher with PLAIN over SASL_SSL, mutual TLS from Kafka
property names, and the broker's refusals (wrong password, a mechanism it does not offer, a
certificate the client does not trust) raised as the broker's errors.

Tansu (the peer broker the other client tests also run against) is not used here: it has no
TLS or SASL listener to test against."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from strom.client import AdminClient, Consumer, Fetcher, Producer
from strom.client.admin_types import NewTopic
from strom.client.properties import client_options
from strom.client.security import ClientSecurity, client_context
from strom.common.errors import NetworkError, error_class
from strom.common.types import TopicPartition
from tests.broker.security.conftest import (  # noqa: F401
    PLAIN_USERS,
    SCRAM_PASSWORD,
    SCRAM_USER,
    SecureBroker,
    certs,
    secure,
)


def _sasl_ssl(secure: SecureBroker, mechanism: str, user: str,  # noqa: F811
              password: str) -> ClientSecurity:
    return ClientSecurity("SASL_SSL", client_context(ca=str(secure.certs.ca)), mechanism,
                          user, password)


def test_admin_producer_and_fetcher_over_sasl_ssl(secure: SecureBroker) -> None:  # noqa: F811
    scram = _sasl_ssl(secure, "SCRAM-SHA-512", SCRAM_USER, SCRAM_PASSWORD)
    plain = _sasl_ssl(secure, "PLAIN", "alice", PLAIN_USERS["alice"])
    bootstrap, topic = secure.bootstrap("SASL_SSL"), f"client-{uuid.uuid4().hex[:8]}"

    async def run() -> list[bytes]:
        async with AdminClient(bootstrap, security=scram) as admin:
            await admin.create_topics([NewTopic(topic, 1, 1)])
            assert topic in await admin.list_topics()
        async with Producer(bootstrap, security=plain) as producer:
            for i in range(10):
                await producer.send(topic, f"s{i}".encode())
            await producer.flush()
        async with Fetcher(bootstrap, security=plain, auto_offset_reset="earliest",
                           max_wait_ms=100) as fetcher:
            fetcher.assign([TopicPartition(topic, 0)])
            got: list[bytes] = []
            while len(got) < 10:
                got += [r.value for r in await fetcher.fetch() if r.value is not None]
            return got

    assert asyncio.run(run()) == [f"s{i}".encode() for i in range(10)]


def test_mutual_tls_from_kafka_properties(secure: SecureBroker) -> None:  # noqa: F811
    files = secure.certs
    options = client_options("admin", {
        "bootstrap.servers": secure.bootstrap("MTLS"), "security.protocol": "SSL",
        "ssl.ca.location": str(files.ca), "ssl.certificate.location": str(files.client_cert),
        "ssl.key.location": str(files.client_key)})

    async def run() -> int:
        async with AdminClient(**options) as admin:
            return len((await admin.describe_cluster()).brokers)

    assert asyncio.run(run()) == 1


def test_a_group_consumer_over_sasl_ssl_from_kafka_properties(
        secure: SecureBroker) -> None:  # noqa: F811
    # The consumer takes the same security settings as the producer and the admin client
    # (it could not reach a TLS or SASL listener before): every connection — fetches, the
    # group coordinator's, metadata — goes through them.
    bootstrap, topic = secure.bootstrap("SASL_SSL"), f"client-{uuid.uuid4().hex[:8]}"
    properties = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL",
                  "ssl.ca.location": str(secure.certs.ca), "sasl.mechanism": "PLAIN",
                  "sasl.username": "alice", "sasl.password": PLAIN_USERS["alice"]}
    admin_options = client_options("admin", properties)
    consumer_options = client_options("consumer", {
        **properties, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
        "fetch.max.wait.ms": "100"})

    async def run() -> tuple[list[bytes], int]:
        async with AdminClient(**admin_options) as admin:
            await admin.create_topics([NewTopic(topic, 2, 1)])
        async with Producer(**client_options("producer", properties)) as producer:
            for i in range(10):
                await producer.send(topic, f"g{i}".encode(), partition=i % 2)
            await producer.flush()
        got: list[bytes] = []
        async with Consumer(**consumer_options) as consumer:
            consumer.subscribe([topic])
            deadline = asyncio.get_running_loop().time() + 30
            while len(got) < 10 and asyncio.get_running_loop().time() < deadline:
                got += [r.value for r in await consumer.poll(0.5) if r.value is not None]
            await consumer.commit()
        async with AdminClient(**admin_options) as admin:
            committed = await admin.list_consumer_group_offsets(f"g-{topic}")
        return sorted(got), sum(o.offset for o in committed.values())

    values, committed = asyncio.run(run())
    assert values == sorted(f"g{i}".encode() for i in range(10))
    assert committed == 10


@pytest.mark.parametrize(("mechanism", "user", "error", "message"), [
    ("PLAIN", "alice", "SASL_AUTHENTICATION_FAILED",
     "Authentication failed: Invalid username or password"),
    ("SCRAM-SHA-256", "nobody", "SASL_AUTHENTICATION_FAILED",
     "invalid credentials with SASL mechanism SCRAM-SHA-256"),
])
def test_refused_credentials_raise_the_broker_error(secure: SecureBroker,  # noqa: F811
                                                    mechanism: str, user: str, error: str,
                                                    message: str) -> None:
    security = _sasl_ssl(secure, mechanism, user, "wrong-pw")

    async def run() -> None:
        async with AdminClient(secure.bootstrap("SASL_SSL"), security=security):
            pass

    with pytest.raises(error_class(error), match=message):
        asyncio.run(run())


def test_a_mechanism_the_broker_does_not_offer(secure: SecureBroker) -> None:  # noqa: F811
    security = ClientSecurity("SASL_PLAINTEXT", None, "OAUTHBEARER",
                              oauth_token=lambda: "x.y.z")

    async def run() -> None:
        async with AdminClient(secure.bootstrap("SASL_PLAINTEXT"), security=security):
            pass

    with pytest.raises(error_class("UNSUPPORTED_SASL_MECHANISM"),
                       match="offers PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"):
        asyncio.run(run())


def test_an_untrusted_broker_certificate(secure: SecureBroker) -> None:  # noqa: F811
    security = ClientSecurity("SSL", client_context(ca=str(secure.certs.rogue_cert)))

    async def run() -> None:
        async with AdminClient(secure.bootstrap("SSL"), security=security):
            pass

    with pytest.raises(NetworkError, match=r"TLS handshake with .* failed"):
        asyncio.run(run())
