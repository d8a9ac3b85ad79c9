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


def test_ip_quotas_with_kafka_configs_options_and_lines(
        broker: EmbeddedBroker, cli: Callable[..., Result]) -> None:
    """``strom configs --entity-type ips`` prints what kafka-configs.sh prints (compared with
    Kafka 4.4's tool); addresses from TEST-NET, never the default, on the shared broker."""
    b = ["--bootstrap-server", broker.bootstrap]
    ip = ["--entity-type", "ips", "--entity-name", "192.0.2.7"]
    added = cli("configs", "alter", *ip, "--add-config", "connection_creation_rate=10", *b)
    assert (added.code, added.out) == (0, "Completed updating config for ip 192.0.2.7.\n")
    described = cli("configs", "describe", *ip, *b)
    assert described.out == "Quota configs for ip '192.0.2.7' are connection_creation_rate=10.0\n"
    assert "ip=192.0.2.7: connection_creation_rate=10.0" in cli("quotas", "describe", *b).out
    default = cli("configs", "alter", "--entity-type", "ips", "--entity-default",
                  "--add-config", "connection_creation_rate=50", "--validate-only", *b)
    assert default.out == "Validated default config for ips in the cluster.\n"
    wrong_key = cli("configs", "alter", *ip, "--add-config", "producer_byte_rate=1", *b)
    assert wrong_key.code == 1 and wrong_key.err.strip().endswith(
        "Only connection quota configs can be added for 'ips' using --bootstrap-server. "
        "Unexpected config names: producer_byte_rate")
    fraction = cli("configs", "alter", *ip, "--add-config", "connection_creation_rate=1.5", *b)
    assert fraction.code == 1 and "cannot be a fractional value" in fraction.err
    host = cli("quotas", "alter", "--entity-type", "ips", "--entity-name", "no-such-host",
               "--add-config", "connection_creation_rate=1", *b)
    assert host.code == 1 and "no-such-host is not a valid IP" in host.err
    removed = cli("configs", "alter", *ip, "--delete-config", "connection_creation_rate", *b)
    assert removed.code == 0, removed.err
    assert cli("configs", "describe", *ip, *b).out == ""
    again = cli("configs", "alter", *ip, "--delete-config", "connection_creation_rate", *b)
    assert again.code == 1 and "Invalid config(s): connection_creation_rate" in again.err
