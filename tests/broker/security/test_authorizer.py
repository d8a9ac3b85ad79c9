"""The ACL matcher on its own: Kafka's StandardAuthorizer rules (module doc of
strom.broker.security.authorizer), the filters of DescribeAcls / DeleteAcls, the config, and
the per-API rule table covering every API strom serves."""

from __future__ import annotations

import pytest

from strom.broker.access import RULES, UNCHECKED
from strom.broker.security.authorizer import (
    AclMap,
    Authorizer,
    AuthorizerConfigError,
    parse_super_users,
)
from strom.common.acl import (
    AccessControlEntry,
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    binding_problem,
)
from strom.common.config import BrokerConfig
from strom.protocol.versions import SUPPORTED

OP, ALLOW, DENY = AclOperation, AclPermissionType.ALLOW, AclPermissionType.DENY
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED


def acls(*rules: tuple[ResourceType, str, PatternType, str, str, AclOperation,
                       AclPermissionType]) -> AclMap:
    out: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
    for rtype, name, kind, principal, host, op, permission in rules:
        pattern = ResourcePattern(rtype, name, kind)
        out[pattern] = out.get(pattern, frozenset()) | {
            AccessControlEntry(principal, host, op, permission)}
    return out


def authorizer(rules: AclMap, **kw: object) -> Authorizer:
    return Authorizer(lambda: rules, **kw)  # type: ignore[arg-type]


def test_literal_allow_applies_to_its_principal_only() -> None:
    a = authorizer(acls((TOPIC, "t", LITERAL, "User:alice", "*", OP.READ, ALLOW)))
    assert a.authorize("User:alice", "1.2.3.4", OP.READ, TOPIC, "t")
    assert not a.authorize("User:bob", "1.2.3.4", OP.READ, TOPIC, "t")
    assert not a.authorize("User:alice", "1.2.3.4", OP.WRITE, TOPIC, "t")
    assert not a.authorize("User:alice", "1.2.3.4", OP.READ, TOPIC, "t2")
    assert not a.authorize("User:alice", "1.2.3.4", OP.READ, GROUP, "t")


def test_prefixed_and_wildcard_patterns_and_principals() -> None:
    a = authorizer(acls((TOPIC, "orders-", PREFIXED, "User:alice", "*", OP.WRITE, ALLOW),
                        (TOPIC, "*", LITERAL, "User:*", "*", OP.DESCRIBE, ALLOW)))
    assert a.authorize("User:alice", "h", OP.WRITE, TOPIC, "orders-eu")
    assert a.authorize("User:alice", "h", OP.WRITE, TOPIC, "orders-")
    assert not a.authorize("User:alice", "h", OP.WRITE, TOPIC, "order")
    assert a.authorize("User:bob", "h", OP.DESCRIBE, TOPIC, "anything")
    assert not a.authorize("User:bob", "h", OP.WRITE, TOPIC, "orders-eu")


def test_deny_wins_over_allow_even_through_all_and_wildcards() -> None:
    a = authorizer(acls((TOPIC, "t", LITERAL, "User:alice", "*", OP.ALL, ALLOW),
                        (TOPIC, "t", PREFIXED, "User:*", "*", OP.WRITE, DENY)))
    assert a.authorize("User:alice", "h", OP.READ, TOPIC, "t")
    assert not a.authorize("User:alice", "h", OP.WRITE, TOPIC, "t")
    deny_all = authorizer(acls((GROUP, "g", LITERAL, "User:alice", "*", OP.READ, ALLOW),
                               (GROUP, "*", LITERAL, "User:alice", "*", OP.ALL, DENY)))
    assert not deny_all.authorize("User:alice", "h", OP.READ, GROUP, "g")


def test_hosts_match_exactly_or_by_wildcard() -> None:
    a = authorizer(acls((TOPIC, "t", LITERAL, "User:alice", "10.0.0.1", OP.READ, ALLOW)))
    assert a.authorize("User:alice", "10.0.0.1", OP.READ, TOPIC, "t")
    assert not a.authorize("User:alice", "10.0.0.2", OP.READ, TOPIC, "t")


def test_implied_operations_come_from_allows_only() -> None:
    a = authorizer(acls((TOPIC, "t", LITERAL, "User:alice", "*", OP.WRITE, ALLOW),
                        (TOPIC, "t", LITERAL, "User:alice", "*", OP.ALTER_CONFIGS, ALLOW)))
    assert a.authorize("User:alice", "h", OP.DESCRIBE, TOPIC, "t")
    assert a.authorize("User:alice", "h", OP.DESCRIBE_CONFIGS, TOPIC, "t")
    assert not a.authorize("User:alice", "h", OP.READ, TOPIC, "t")
    for implying in (OP.READ, OP.DELETE, OP.ALTER):
        assert authorizer(acls((TOPIC, "t", LITERAL, "User:a", "*", implying, ALLOW))
                          ).authorize("User:a", "h", OP.DESCRIBE, TOPIC, "t")
    # A DENY of READ does not deny DESCRIBE.
    denied_read = authorizer(acls((TOPIC, "t", LITERAL, "User:a", "*", OP.DESCRIBE, ALLOW),
                                  (TOPIC, "t", LITERAL, "User:a", "*", OP.READ, DENY)))
    assert denied_read.authorize("User:a", "h", OP.DESCRIBE, TOPIC, "t")


def test_super_users_and_allow_everyone_if_no_acl_found() -> None:
    rules = acls((TOPIC, "guarded", LITERAL, "User:alice", "*", OP.READ, ALLOW))
    a = authorizer(rules, super_users=frozenset({"User:root"}))
    assert a.authorize("User:root", "h", OP.DELETE, TOPIC, "guarded")
    assert not a.authorize("User:bob", "h", OP.READ, TOPIC, "free")
    open_ = authorizer(rules, allow_if_no_acl=True)
    assert open_.authorize("User:bob", "h", OP.READ, TOPIC, "free")
    # An ACL for someone else on the resource means it is no longer "no ACL found".
    assert not open_.authorize("User:bob", "h", OP.READ, TOPIC, "guarded")


def test_the_index_follows_the_current_acls() -> None:
    current: list[AclMap] = [{}]
    a = Authorizer(lambda: current[0])
    assert not a.authorize("User:a", "h", OP.READ, TOPIC, "t")
    current[0] = acls((TOPIC, "t", LITERAL, "User:a", "*", OP.READ, ALLOW))
    assert a.authorize("User:a", "h", OP.READ, TOPIC, "t")


def test_authorized_operations_are_the_allowed_supported_ones() -> None:
    a = authorizer(acls((GROUP, "g", LITERAL, "User:a", "*", OP.READ, ALLOW)))
    assert a.authorized_operations("User:a", "h", GROUP, "g") == {OP.READ, OP.DESCRIBE}


def test_filters_match_as_describe_and_delete_acls_do() -> None:
    literal = AclBinding(ResourcePattern(TOPIC, "orders", LITERAL),
                         AccessControlEntry("User:a", "*", OP.READ, ALLOW))
    prefixed = AclBinding(ResourcePattern(TOPIC, "ord", PREFIXED),
                          AccessControlEntry("User:b", "*", OP.WRITE, DENY))
    wildcard = AclBinding(ResourcePattern(TOPIC, "*", LITERAL),
                          AccessControlEntry("User:c", "*", OP.READ, ALLOW))
    every = [literal, prefixed, wildcard]
    assert [b for b in every if AclFilter().matches(b)] == every
    match = AclFilter(TOPIC, "orders", PatternType.MATCH)
    assert [b for b in every if match.matches(b)] == every
    assert [b for b in every if AclFilter(TOPIC, "orders").matches(b)] == [literal]
    assert [b for b in every if AclFilter(TOPIC, "ord", PREFIXED).matches(b)] == [prefixed]
    assert [b for b in every if AclFilter(permission=DENY).matches(b)] == [prefixed]
    assert AclFilter(operation=OP.UNKNOWN).problem() is not None


def test_binding_checks_refuse_what_kafka_refuses() -> None:
    def problem(rtype: ResourceType, name: str, kind: PatternType, principal: str,
                op: AclOperation) -> str | None:
        return binding_problem(AclBinding(ResourcePattern(rtype, name, kind),
                                          AccessControlEntry(principal, "*", op, ALLOW)))

    assert problem(TOPIC, "t", LITERAL, "User:a", OP.READ) is None
    assert problem(CLUSTER, "kafka-cluster", LITERAL, "User:a", OP.ALTER) is None
    assert problem(CLUSTER, "other", LITERAL, "User:a", OP.ALTER) is not None
    assert problem(TOPIC, "t", PatternType.MATCH, "User:a", OP.READ) is not None
    assert problem(TOPIC, "t", LITERAL, "alice", OP.READ) is not None
    assert problem(TOPIC, "t", LITERAL, "User:a", OP.ANY) is not None
    assert problem(GROUP, "g", LITERAL, "User:a", OP.WRITE) is not None
    assert problem(TOPIC, "", LITERAL, "User:a", OP.READ) is not None


def test_config_selects_refuses_unknown_names_and_parses_super_users() -> None:
    assert Authorizer.from_config(BrokerConfig({}), dict) is None
    for name in ("acls", "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                 "kafka.security.authorizer.AclAuthorizer"):
        config = BrokerConfig({"authorizer.class.name": name,
                               "super.users": "User:a; User:b"})
        a = Authorizer.from_config(config, dict)
        assert a is not None and a.super_users == {"User:a", "User:b"}
    with pytest.raises(AuthorizerConfigError, match=r"com\.example\.MyAuthorizer"):
        Authorizer.from_config(BrokerConfig({"authorizer.class.name":
                                             "com.example.MyAuthorizer"}), dict)
    with pytest.raises(AuthorizerConfigError, match="not a principal"):
        parse_super_users("admin")


def test_every_served_api_has_a_rule_or_is_deliberately_unchecked() -> None:
    assert set(SUPPORTED) == set(RULES) | UNCHECKED
    assert not set(RULES) & UNCHECKED
