"""ACLs (KIP-11 / KIP-290): the admin client's ``create_acls``, ``describe_acls`` and
``delete_acls``, sent to any broker as Kafka's admin client does.

Bindings and filters are :mod:`strom.common.acl`'s. A creation or filter the broker refuses
raises its :class:`~strom.common.errors.KafkaError` (the first one, after all were sent)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from strom.client.conn import Connection
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
from strom.common.errors import error_for
from strom.protocol.versions import ApiKey


def _filter_fields(f: AclFilter) -> dict[str, Any]:
    return {"resource_type_filter": int(f.resource_type), "resource_name_filter": f.name,
            "pattern_type_filter": int(f.pattern_type), "principal_filter": f.principal,
            "host_filter": f.host, "operation": int(f.operation),
            "permission_type": int(f.permission)}


def _binding(resource_type: int, name: str, pattern_type: int, acl: Any) -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType(resource_type), name, PatternType(pattern_type)),
        AccessControlEntry(acl.principal, acl.host, AclOperation(acl.operation),
                           AclPermissionType(acl.permission_type)))


async def create(conn: Connection, bindings: Iterable[AclBinding]) -> None:
    creations = [{"resource_type": int(b.pattern.resource_type),
                  "resource_name": b.pattern.name,
                  "resource_pattern_type": int(b.pattern.pattern_type),
                  "principal": b.entry.principal, "host": b.entry.host,
                  "operation": int(b.entry.operation),
                  "permission_type": int(b.entry.permission)} for b in bindings]
    response = await conn.request(ApiKey.CREATE_ACLS, {"creations": creations})
    for result in response.results:
        if result.error_code:
            raise error_for(result.error_code, result.error_message)


async def describe(conn: Connection, acl_filter: AclFilter) -> list[AclBinding]:
    response = await conn.request(ApiKey.DESCRIBE_ACLS, _filter_fields(acl_filter))
    if response.error_code:
        raise error_for(response.error_code, response.error_message)
    return sorted(_binding(r.resource_type, r.resource_name, r.pattern_type, acl)
                  for r in response.resources for acl in r.acls)


async def delete(conn: Connection, filters: Iterable[AclFilter]) -> list[AclBinding]:
    response = await conn.request(ApiKey.DELETE_ACLS,
                                  {"filters": [_filter_fields(f) for f in filters]})
    deleted: list[AclBinding] = []
    for result in response.filter_results:
        if result.error_code:
            raise error_for(result.error_code, result.error_message)
        deleted += [_binding(m.resource_type, m.resource_name, m.pattern_type, m)
                    for m in result.matching_acls]
    return deleted
