"""``strom acls add|list|remove`` against a real broker enforcing ACLs: what the CLI adds is
enforced for a SASL principal, listed in kafka-acls.sh's format, and removed; usage errors
are one clear line."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

from strom.protocol.versions import ApiKey
from strom.testing import EmbeddedBroker
from tests.broker.security.test_acls import USERS, AclBroker, acl_broker, code  # noqa: F401
from tests.cli.conftest import Result


def _describe(broker: AclBroker, user: str, topic: str) -> int:
    response = broker.call(user, ApiKey.METADATA, 12, {
        "topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False})
    return int(response.topics[0].error_code)


def test_add_list_remove(acl_broker: AclBroker,  # noqa: F811
                         cli: Callable[..., Result]) -> None:
    b = ["--bootstrap-server", acl_broker.plain]
    prefix = f"cli-{uuid.uuid4().hex[:6]}-"
    topic = prefix + "orders"
    admin = acl_broker.admin()
    try:
        admin.create_topic(topic, 1, 1)
    finally:
        admin.close()
    denied = code("TOPIC_AUTHORIZATION_FAILED")
    assert _describe(acl_broker, "carol", topic) == denied
    added = cli("acls", "add", "--allow-principal", "User:carol", "--operation", "Read",
                "--operation", "describe-configs", "--topic", prefix,
                "--resource-pattern-type", "prefixed", *b)
    assert added.code == 0, added.err
    assert (f"ResourcePattern(resourceType=TOPIC, name={prefix}, patternType=PREFIXED)"
            in added.out)
    assert _describe(acl_broker, "carol", topic) == 0  # READ implies DESCRIBE
    listed = cli("acls", "list", "--topic", prefix, *b)
    assert listed.code == 0, listed.err
    assert listed.out.splitlines()[1:3] == [
        " \t(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)",
        " \t(principal=User:carol, host=*, operation=DESCRIBE_CONFIGS, permissionType=ALLOW)",
    ]
    matched = cli("acls", "list", "--topic", topic, "--resource-pattern-type", "match", *b)
    assert f"name={prefix}, patternType=PREFIXED" in matched.out
    removed = cli("acls", "remove", "--topic", prefix, "--resource-pattern-type", "prefixed",
                  "--force", *b)
    assert removed.code == 0 and "Removed ACLs:" in removed.out
    assert _describe(acl_broker, "carol", topic) == denied
    assert cli("acls", "list", "--topic", prefix, *b).out.strip() == ""


def test_producer_and_consumer_shortcuts(acl_broker: AclBroker,  # noqa: F811
                                         cli: Callable[..., Result]) -> None:
    b = ["--bootstrap-server", acl_broker.plain]
    topic, group = f"cli-{uuid.uuid4().hex[:6]}", f"cli-g-{uuid.uuid4().hex[:6]}"
    added = cli("acls", "add", "--allow-principal", "User:carol", "--consumer", "--topic",
                topic, "--group", group, *b)
    assert added.code == 0, added.err
    listed = cli("acls", "list", "--principal", "User:carol", "--topic", topic, "--group",
                 group, *b).out
    assert "operation=READ" in listed and "operation=DESCRIBE" in listed
    assert f"resourceType=GROUP, name={group}" in listed
    assert cli("acls", "remove", "--allow-principal", "User:carol", "--consumer", "--topic",
               topic, "--group", group, *b).code == 0
    assert "carol" not in cli("acls", "list", "--topic", topic, "--group", group, *b).out


def test_over_sasl_with_a_command_config(acl_broker: AclBroker,  # noqa: F811
                                        cli: Callable[..., Result], tmp_path: Path) -> None:
    """The CLI as a SASL principal: a super user may add ACLs, bob (no ALTER on the cluster)
    gets CLUSTER_AUTHORIZATION_FAILED."""
    b = ["--bootstrap-server", acl_broker.sasl]
    configs = {}
    for user in ("admin", "bob"):
        configs[user] = tmp_path / f"{user}.properties"
        configs[user].write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
            f"sasl.username={user}\nsasl.password={USERS[user]}\n")
    group = f"cli-sasl-{uuid.uuid4().hex[:6]}"
    args = ("acls", "add", "--allow-principal", "User:carol", "--operation", "Read",
            "--group", group, *b)
    refused = cli(*args, "--command-config", str(configs["bob"]))
    assert refused.code == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.err
    added = cli(*args, "--command-config", str(configs["admin"]))
    assert added.code == 0, added.err
    listed = cli("acls", "list", "--group", group, *b, "--command-config",
                 str(configs["admin"]))
    assert "principal=User:carol, host=*, operation=READ" in listed.out


def test_usage_errors(acl_broker: AclBroker,  # noqa: F811
                      cli: Callable[..., Result]) -> None:
    b = ["--bootstrap-server", acl_broker.plain]
    no_principal = cli("acls", "add", "--topic", "t", "--operation", "Read", *b)
    assert no_principal.code == 1 and "--allow-principal, --deny-principal" in no_principal.err
    no_resource = cli("acls", "add", "--allow-principal", "User:a", *b)
    assert no_resource.code == 1 and "--topic, --group, --cluster" in no_resource.err
    bad_op = cli("acls", "add", "--allow-principal", "User:a", "--topic", "t",
                 "--operation", "Fly", *b)
    assert bad_op.code == 1 and "unknown operation 'Fly'" in bad_op.err
    bad_principal = cli("acls", "add", "--allow-principal", "alice", "--topic", "t", *b)
    assert bad_principal.code == 1 and "must be <type>:<name>" in bad_principal.err
    unsupported = cli("acls", "add", "--allow-principal", "User:a", "--group", "g",
                      "--operation", "Write", *b)
    assert unsupported.code == 1 and "INVALID_REQUEST" in unsupported.err
    any_kind = cli("acls", "add", "--allow-principal", "User:a", "--topic", "t",
                   "--resource-pattern-type", "any", *b)
    assert any_kind.code == 1 and "not valid when adding acls" in any_kind.err


def test_a_broker_without_an_authorizer_refuses_acls_as_kafka(
        broker: EmbeddedBroker, cli: Callable[..., Result]) -> None:
    """kafka-acls.sh's line and status against a broker without ``authorizer.class.name``
    (Kafka 4.4 prints the same message; its add lists the resource's ACLs first, so it
    quotes DescribeAcls' "... on the broker")."""
    b = ["--bootstrap-server", broker.bootstrap]
    added = cli("acls", "add", "--allow-principal", "User:carol", "--operation", "Read",
                "--topic", "t", *b)
    assert (added.code, added.out) == (1, "")
    assert added.err.strip() == "Error while executing ACL command: No Authorizer is configured."
    listed = cli("acls", "list", *b)
    assert listed.code == 1 and listed.err.strip() == (
        "Error while executing ACL command: No Authorizer is configured on the broker")
    removed = cli("acls", "remove", "--topic", "t", "--force", *b)
    assert removed.code == 1 and "No Authorizer is configured" in removed.err
