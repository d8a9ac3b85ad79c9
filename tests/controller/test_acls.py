"""controller.acls: what CreateAcls / DeleteAcls write and answer, on the in-memory store."""

from __future__ import annotations

from strom.common.acl import (
    AccessControlEntry,
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strom.controller import acls
from strom.testing.metadata import MemoryMetadataStore

TOPIC = ResourcePattern(ResourceType.TOPIC, "t", PatternType.LITERAL)
READ = AccessControlEntry("User:a", "*", AclOperation.READ, AclPermissionType.ALLOW)
WRITE = AccessControlEntry("User:b", "*", AclOperation.WRITE, AclPermissionType.DENY)


def test_create_stores_per_pattern_refuses_bad_bindings_and_is_idempotent() -> None:
    store = MemoryMetadataStore()
    bad = AclBinding(ResourcePattern(ResourceType.GROUP, "g", PatternType.MATCH), READ)
    results = acls.create(store, [AclBinding(TOPIC, READ), bad, AclBinding(TOPIC, WRITE)])
    assert results[0] is None and results[2] is None
    assert results[1] is not None and results[1][0] == "INVALID_REQUEST"
    assert store.image.acls == {TOPIC: frozenset({READ, WRITE})}
    assert acls.create(store, [AclBinding(TOPIC, READ)]) == [None]
    assert store.image.acls == {TOPIC: frozenset({READ, WRITE})}


def test_delete_reports_what_each_filter_removed() -> None:
    store = MemoryMetadataStore()
    acls.create(store, [AclBinding(TOPIC, READ), AclBinding(TOPIC, WRITE)])
    results = acls.delete(store, [AclFilter(permission=AclPermissionType.DENY),
                                  AclFilter(operation=AclOperation.UNKNOWN),
                                  AclFilter(principal="User:nobody")])
    assert results[0] == (None, [AclBinding(TOPIC, WRITE)])
    assert results[1][0] is not None and results[1][0][0] == "INVALID_REQUEST"
    assert results[2] == (None, [])
    assert store.image.acls == {TOPIC: frozenset({READ})}
    acls.delete(store, [AclFilter()])
    assert store.image.acls == {}
