"""Every ``strom`` command that talks to brokers, against a broker whose only listener is
SASL_SSL (client certificates required): Kafka's client properties in ``--command-config``
(or ``--producer.config`` / ``--consumer.config``) carry TLS and SASL; a wrong password is
one clear error line and exit status 1."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.broker.security.conftest import (  # noqa: F401
    SecureBroker,
    certs,
    sasl_ssl_client_properties,
    sasl_ssl_only,
)
from tests.cli.conftest import Result

Run = Callable[..., Result]


def _properties(path: Path, values: dict[str, str]) -> str:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return str(path)


@pytest.fixture
def secured(sasl_ssl_only: SecureBroker, tmp_path: Path,  # noqa: F811
            cli: Run) -> Callable[..., Result]:
    """``strom ARGS`` with the SASL_SSL listener and admin's client properties."""
    config = _properties(tmp_path / "client.properties",
                         sasl_ssl_client_properties(sasl_ssl_only.certs, "admin"))
    bootstrap = sasl_ssl_only.bootstrap("SASL_SSL")

    def run(*args: str, option: str = "--command-config", stdin: str = "") -> Result:
        result = cli(*args, "--bootstrap-server", bootstrap, option, config, stdin=stdin)
        assert "Traceback" not in result.err
        return result

    return run


def _ok(result: Result) -> Result:
    assert result.code == 0, result.err
    return result


def test_topics_configs_and_data(secured: Run) -> None:
    topic = f"sec-{uuid.uuid4().hex[:6]}"
    _ok(secured("topics", "create", topic, "--partitions", "2"))
    assert topic in _ok(secured("topics", "list")).out
    assert topic in _ok(secured("topics", "describe", topic)).out
    _ok(secured("topics", "alter", topic, "--config", "retention.ms=3600000"))
    _ok(secured("configs", "alter", "--topic", topic, "--set", "min.insync.replicas=1"))
    described = _ok(secured("configs", "describe", "--topic", topic)).out
    assert "retention.ms=3600000" in described and "min.insync.replicas=1" in described
    _ok(secured("produce", topic, "--partition", "0", option="--producer.config",
                stdin="a\nb\nc\n"))
    consumed = _ok(secured("consume", topic, "--from-beginning", "--max-messages", "3",
                           "--timeout-ms", "10000", option="--consumer.config"))
    assert consumed.out.splitlines() == ["a", "b", "c"]
    assert f"{topic}:0:3" in _ok(secured("get-offsets", "--topic", topic)).out
    _ok(secured("delete-records", "--topic", topic, "--partition", "0", "--offset", "1"))
    assert topic in _ok(secured("log-dirs", "--topic-list", topic)).out
    _ok(secured("perf", "produce", "--topic", topic, "--num-records", "50",
                "--record-size", "10", "--quiet"))
    _ok(secured("perf", "consume", "--topic", topic, "--num-records", "52", "--quiet",
                "--timeout-ms", "10000"))
    _ok(secured("topics", "delete", topic))


def test_groups_and_group_consume(secured: Run) -> None:
    topic, group = f"secg-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    _ok(secured("topics", "create", topic))
    _ok(secured("produce", topic, stdin="x\ny\n"))
    consumed = _ok(secured("consume", topic, "--group", group, "--from-beginning",
                           "--max-messages", "2", "--timeout-ms", "10000"))
    assert consumed.out.splitlines() == ["x", "y"]
    assert group in _ok(secured("groups", "list")).out
    described = _ok(secured("groups", "describe", group)).out
    assert topic in described
    _ok(secured("groups", "reset-offsets", group, "--topic", topic, "--to-earliest",
                "--execute"))
    _ok(secured("groups", "delete", group))


def test_cluster_and_transaction_tools(secured: Run) -> None:
    assert "ApiVersions" in _ok(secured("api-versions")).out
    assert _ok(secured("cluster", "describe")).out
    assert _ok(secured("transactions", "list")).out.startswith("TransactionalId")
    topic = f"sect-{uuid.uuid4().hex[:6]}"
    _ok(secured("topics", "create", topic))
    assert _ok(secured("producers", "describe", "--topic", topic, "--partition", "0")
               ).out.startswith("ProducerId")
    assert _ok(secured("transactions", "find-hanging", "--broker-id", "0")
               ).out.startswith("Topic")
    assert _ok(secured("users", "list")).out.strip() == "(no SCRAM users)"
    _ok(secured("quotas", "alter", "--entity-type", "users", "--entity-name", "bob",
                "--add-config", "producer_byte_rate=1048576"))
    assert "producer_byte_rate=1048576" in _ok(secured("quotas", "describe")).out


def test_wrong_password_is_one_clear_line(sasl_ssl_only: SecureBroker,  # noqa: F811
                                          cli: Run, tmp_path: Path) -> None:
    properties = {**sasl_ssl_client_properties(sasl_ssl_only.certs, "admin"),
                  "sasl.password": "wrong"}
    config = _properties(tmp_path / "bad.properties", properties)
    b = ["--bootstrap-server", sasl_ssl_only.bootstrap("SASL_SSL"), "--command-config", config]
    for args in (["topics", "list"], ["consume", "t", "--max-messages", "1"]):
        result = cli(*args, *b)
        assert result.code == 1, result
        assert "Traceback" not in result.err
        lines = result.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"strom {args[0]}: error: ")
        assert lines[0].endswith("SASL_AUTHENTICATION_FAILED (58): Authentication failed: "
                                 "Invalid username or password")
