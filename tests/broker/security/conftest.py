"""One broker with every kind of listener, for the security tests of this package.

Listeners: PLAINTEXT, SSL (client certificates requested), MTLS (SSL, certificates
required), SASL_PLAINTEXT and SASL_SSL with PLAIN (users from the JAAS config) and
SCRAM-SHA-256 / SCRAM-SHA-512 (users created through AlterUserScramCredentials by the real
confluent-kafka admin client on the PLAINTEXT listener)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from strom.testing import EmbeddedBroker
from tests.broker.security.certs import KEY_PASSWORD, Certs, make_certs

PLAIN_USERS = {"alice": "alice-pw", "admin": "admin-pw"}
SCRAM_USER, SCRAM_PASSWORD = "bob", "bob-pw"
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-pw" '
        + " ".join(f'user_{u}="{p}"' for u, p in PLAIN_USERS.items()) + ";")


@dataclass
class SecureBroker:
    broker: EmbeddedBroker
    certs: Certs

    def bootstrap(self, listener: str) -> str:
        return self.broker.bootstrap_of(listener)


def secure_config(certs: Certs) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0,"
                     "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,"
                                          "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.location": str(certs.broker_keystore),
        "ssl.key.password": KEY_PASSWORD,
        "ssl.truststore.location": str(certs.ca),
        "ssl.client.auth": "requested",
        "listener.name.mtls.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "sasl.jaas.config": JAAS,
    }


def sasl_ssl_only_config(certs: Certs) -> dict[str, str]:
    """One SASL_SSL listener, also the inter-broker listener: client certificates required
    (the broker presents its keystore), and the broker logs in with PLAIN as admin, the one
    super user (ACLs are on, so its markers need that)."""
    return {
        "listeners": "SASL_SSL://127.0.0.1:0",
        "security.inter.broker.protocol": "SASL_SSL",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "ssl.keystore.location": str(certs.broker_keystore),
        "ssl.key.password": KEY_PASSWORD,
        "ssl.truststore.location": str(certs.ca),
        "ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.jaas.config": JAAS,
        "authorizer.class.name": "acls",
        "super.users": "User:admin",
    }


def sasl_ssl_client_properties(certs: Certs, user: str = "alice") -> dict[str, str]:
    """Kafka client properties (librdkafka's names) for :func:`sasl_ssl_only_config`."""
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": PLAIN_USERS[user],
            "ssl.ca.location": str(certs.ca),
            "ssl.certificate.location": str(certs.client_cert),
            "ssl.key.location": str(certs.client_key)}


def create_scram_user(bootstrap: str, user: str, password: str) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(m, 4096),
                                            password.encode())
               for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(10)


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(Path(tmp_path_factory.mktemp("certs")))


@pytest.fixture(scope="session")
def secure(certs: Certs) -> Iterator[SecureBroker]:
    with EmbeddedBroker(secure_config(certs)) as broker:
        create_scram_user(broker.bootstrap_of("PLAINTEXT"), SCRAM_USER, SCRAM_PASSWORD)
        yield SecureBroker(broker, certs)


@pytest.fixture(scope="session")
def sasl_ssl_only(certs: Certs) -> Iterator[SecureBroker]:
    """A broker whose only listener is SASL_SSL (see :func:`sasl_ssl_only_config`)."""
    with EmbeddedBroker(sasl_ssl_only_config(certs)) as broker:
        yield SecureBroker(broker, certs)
