"""``strom users create|list|delete`` against a real broker with SASL listeners: a user the
CLI creates logs in with SCRAM through librdkafka; a deleted one no longer can."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError

from tests.broker.security.conftest import (  # noqa: F401
    SCRAM_PASSWORD,
    SCRAM_USER,
    SecureBroker,
    certs,
    secure,
)
from tests.broker.security.test_clients import _confluent_errors, confluent_conf
from tests.cli.conftest import Result


def _login(broker: SecureBroker, user: str, password: str, mechanism: str) -> list[Any]:
    conf = {**confluent_conf(broker, "SASL_PLAINTEXT", mechanism, user=user),
            "sasl.password": password}
    return _confluent_errors(conf, {KafkaError._AUTHENTICATION}, seconds=3)


def test_create_list_delete(secure: SecureBroker,  # noqa: F811
                            cli: Callable[..., Result]) -> None:
    b = ["--bootstrap-server", secure.bootstrap("PLAINTEXT")]
    user = f"cli-{uuid.uuid4().hex[:6]}"
    created = cli("users", "create", user, "--password", "pw-1", "--iterations", "4096", *b)
    assert created.code == 0, created.err
    assert f"Created SCRAM credentials of user {user} (SCRAM-SHA-256, SCRAM-SHA-512)" \
        in created.out
    listed = cli("users", "list", user, *b)
    assert listed.out.strip() == (f"{user}: SCRAM-SHA-256 (iterations 4096), "
                                  "SCRAM-SHA-512 (iterations 4096)")
    assert not [e for e in _login(secure, user, "pw-1", "SCRAM-SHA-256")
                if e.code() == KafkaError._AUTHENTICATION]
    too_few = cli("users", "create", user, "--password", "x", "--iterations", "10", *b)
    assert too_few.code != 0 and "Too few iterations" in too_few.err
    deleted = cli("users", "delete", user, *b)
    assert deleted.code == 0, deleted.err
    assert any(e.code() == KafkaError._AUTHENTICATION
               for e in _login(secure, user, "pw-1", "SCRAM-SHA-512"))
    missing = cli("users", "list", user, *b)
    assert missing.code != 0 and f"Attempt to describe nonexistent user: {user}" in (
        missing.err + missing.out)


def test_users_over_a_sasl_ssl_listener(secure: SecureBroker,  # noqa: F811
                                        cli: Callable[..., Result], tmp_path: Path) -> None:
    """The CLI reaches a SASL_SSL-only listener with Kafka's client properties."""
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=SASL_SSL\n"
                      "sasl.mechanism=SCRAM-SHA-256\n"
                      "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule"
                      f' required username="{SCRAM_USER}" password="{SCRAM_PASSWORD}";\n'
                      f"ssl.truststore.location={secure.certs.ca}\n")
    b = ["--bootstrap-server", secure.bootstrap("SASL_SSL"), "--command-config", str(config)]
    user = f"tls-{uuid.uuid4().hex[:6]}"
    created = cli("users", "create", user, "--password", "pw", *b)
    assert created.code == 0, created.err
    listed = cli("users", "list", user, *b)
    assert listed.code == 0 and listed.out.startswith(f"{user}: SCRAM-SHA-256"), listed.err
    assert cli("users", "delete", user, *b).code == 0
