"""``strom quotas describe|alter`` against a real broker, with kafka-configs.sh's entity
options. Quotas are set only for made-up users (never a default entity), so the shared
session broker's other clients are never throttled, and removed at the end."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from strom.testing import EmbeddedBroker
from tests.cli.conftest import Result


def test_alter_describe_and_delete(broker: EmbeddedBroker, cli: Callable[..., Result]) -> None:
    b = ["--bootstrap-server", broker.bootstrap]
    user = f"cli-{uuid.uuid4().hex[:6]}"
    alice_default = ["--entity-type", "users", "--entity-name", user,
                     "--entity-type", "clients", "--entity-default"]
    checked = cli("quotas", "alter", *alice_default, "--add-config",
                  "producer_byte_rate=1024", "--validate-only", *b)
    assert checked.code == 0, checked.err
    assert f"Validated client quotas of client-id=<default> user={user}" in checked.out
    assert user not in cli("quotas", "describe", *b).out
    altered = cli("quotas", "alter", *alice_default, "--add-config",
                  "producer_byte_rate=1024,request_percentage=50", *b)
    assert altered.code == 0, altered.err
    assert cli("quotas", "alter", "--entity-type", "users", "--entity-name", user,
               "--add-config", "consumer_byte_rate=2048", *b).code == 0
    both = cli("quotas", "describe", *alice_default, *b).out.strip()
    assert both == (f"client-id=<default> user={user}: "
                    "producer_byte_rate=1024.0,request_percentage=50.0")
    only_user = cli("quotas", "describe", "--entity-type", "users", "--entity-name", user, *b)
    assert only_user.out.strip() == f"user={user}: consumer_byte_rate=2048.0"
    bad = cli("quotas", "alter", "--entity-type", "users", "--entity-name", user,
              "--add-config", "producer_byte_rate=1.5", *b)
    assert bad.code != 0 and "cannot be a fractional value" in bad.err
    missing = cli("quotas", "alter", "--entity-type", "users", "--add-config", "a=1", *b)
    assert missing.code != 0 and "--entity-name" in missing.err
    assert cli("quotas", "alter", *alice_default, "--delete-config",
               "producer_byte_rate,request_percentage", *b).code == 0
    assert cli("quotas", "alter", "--entity-type", "users", "--entity-name", user,
               "--delete-config", "consumer_byte_rate", *b).code == 0
    assert user not in cli("quotas", "describe", *b).out
