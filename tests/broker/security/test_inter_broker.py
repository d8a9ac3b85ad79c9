"""The broker as a client of its inter-broker listener: transaction markers over SASL_SSL on a
broker without any PLAINTEXT listener (client certificates required, PLAIN login from the
JAAS config), and start-up refusals when that listener's security cannot be met."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest

from strom.broker.security.authorizer import Authorizer
from strom.broker.security.inter_broker import broker_principal, inter_broker_security
from strom.broker.security.listeners import parse_listeners
from strom.broker.security.principal import ANONYMOUS
from strom.common.config import BrokerConfig
from tests.broker.security.certs import Certs
from tests.broker.security.conftest import (
    SecureBroker,
    sasl_ssl_client_properties,
    sasl_ssl_only_config,
)
from tests.broker.security.test_tls import _start_fails


def _conf(broker: SecureBroker, **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": broker.bootstrap("SASL_SSL"),
            **sasl_ssl_client_properties(broker.certs, "admin"), **extra}


def _create_topic(broker: SecureBroker, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(_conf(broker))
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(15)


def _read_committed(broker: SecureBroker, topic: str, expected: int) -> list[bytes]:
    from confluent_kafka import Consumer

    consumer = Consumer(_conf(broker, **{"group.id": f"g-{uuid.uuid4().hex[:6]}",
                                         "auto.offset.reset": "earliest",
                                         "isolation.level": "read_committed",
                                         "enable.partition.eof": True}))
    consumer.subscribe([topic])
    values: list[bytes] = []
    eof: set[int] = set()
    try:
        for _ in range(200):
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == msg.error()._PARTITION_EOF:
                    eof.add(msg.partition())
                    if len(eof) == 2 and len(values) >= expected:
                        break
                    continue
                raise AssertionError(msg.error())
            values.append(msg.value())
    finally:
        consumer.close()
    return values


def test_transaction_markers_over_sasl_ssl(sasl_ssl_only: SecureBroker) -> None:
    """A committed transaction becomes visible to read_committed (the markers reached the
    partition leader through the SASL_SSL listener, authenticated as the super user admin);
    an aborted one never does."""
    from confluent_kafka import Producer

    assert list(sasl_ssl_only.broker.listeners) == ["SASL_SSL"]
    topic = f"txn-{uuid.uuid4().hex[:6]}"
    _create_topic(sasl_ssl_only, topic)
    producer = Producer(_conf(sasl_ssl_only, **{"transactional.id": f"t-{topic}"}))
    producer.init_transactions(20)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, f"aborted-{i}".encode(), partition=i % 2)
    producer.abort_transaction(20)
    producer.begin_transaction()
    for i in range(6):
        producer.produce(topic, f"committed-{i}".encode(), partition=i % 2)
    producer.commit_transaction(20)
    values = _read_committed(sasl_ssl_only, topic, 6)
    assert sorted(values) == [f"committed-{i}".encode() for i in range(6)]
    assert not [line for line in sasl_ssl_only.broker.output
                if "cannot connect" in line or "super.users" in line]


_BAD_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
             'user_admin="admin-pw";')


@pytest.mark.parametrize(("change", "message"), [
    ({"sasl.mechanism.inter.broker.protocol": "GSSAPI"},
     "inter-broker listener SASL_SSL (SASL_SSL): sasl.mechanism.inter.broker.protocol=GSSAPI "
     "cannot be used by strom's broker-to-broker client; set it to one of PLAIN, "
     "SCRAM-SHA-256, SCRAM-SHA-512"),
    ({"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
      "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256"},
     "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512 is not in the listener's "
     "sasl.enabled.mechanisms (PLAIN, SCRAM-SHA-256)"),
    ({"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
      "sasl.enabled.mechanisms": "SCRAM-SHA-256", "sasl.jaas.config": ""},
     "no credentials for the broker's own SCRAM-SHA-256 login: set "
     "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config"),
    ({"sasl.jaas.config": _BAD_JAAS},
     "has no username and password options for the broker's own PLAIN login"),
])
def test_unusable_inter_broker_security_stops_the_broker(
        tmp_path: Path, certs: Certs, change: dict[str, str], message: str) -> None:
    assert message in _start_fails(tmp_path, {**sasl_ssl_only_config(certs), **change})


def test_the_brokers_principal_is_checked_against_super_users(
        certs: Certs, caplog: pytest.LogCaptureFixture) -> None:
    """With ACLs on, the start warns when the broker's own login is not a super user."""
    config = BrokerConfig({**sasl_ssl_only_config(certs), "super.users": "User:alice"})
    security = inter_broker_security(config, parse_listeners(config))
    assert broker_principal(security) == "User:admin"
    assert broker_principal(None) == ANONYMOUS
    authorizer = Authorizer.from_config(config, dict)
    assert authorizer is not None
    with caplog.at_level(logging.WARNING):
        authorizer.warn_about_broker_principal(broker_principal(security))
    assert "come as User:admin, which is not in super.users" in caplog.text
    caplog.clear()
    admin_is_super = Authorizer.from_config(BrokerConfig(sasl_ssl_only_config(certs)), dict)
    assert admin_is_super is not None
    admin_is_super.warn_about_broker_principal(broker_principal(security))
    assert not caplog.text
