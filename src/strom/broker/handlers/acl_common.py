"""Shared by the CreateAcls / DescribeAcls / DeleteAcls handlers: wire fields ⇄ ACL model.

Codes outside Kafka's enums decode as UNKNOWN (0), which the checks then refuse, as Kafka's
``fromCode`` does.

Without an authorizer (``authorizer.class.name`` empty) the three APIs answer
SECURITY_DISABLED and store, list or remove nothing, as Kafka's ``AclApis``: ACLs that are
stored but never enforced would make an operator believe the cluster is locked down. The
messages are Kafka's (AclCommand prints them: "No Authorizer is configured on the broker")."""

from __future__ import annotations

from enum import IntEnum
from typing import Any, TypeVar

from strom.common.acl import (
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from strom.common.errors import error_class

E = TypeVar("E", bound=IntEnum)

SECURITY_DISABLED = error_class("SECURITY_DISABLED").code
#: Kafka's messages: CreateAcls / DeleteAcls, and DescribeAcls.
NO_AUTHORIZER = "No Authorizer is configured."
NO_AUTHORIZER_ON_BROKER = "No Authorizer is configured on the broker"


def code_of(enum: type[E], value: int) -> E:
    """``value`` as a member of ``enum``; UNKNOWN (0) for a code Kafka does not define."""
    try:
        return enum(int(value))
    except ValueError:
        return enum(0)


def filter_of(item: Any, version: int) -> AclFilter:
    """A DescribeAcls request or a DeleteAcls filter entry (the same field names)."""
    return AclFilter(
        code_of(ResourceType, item.resource_type_filter), item.resource_name_filter,
        code_of(PatternType, item.pattern_type_filter),
        item.principal_filter, item.host_filter,
        code_of(AclOperation, item.operation), code_of(AclPermissionType, item.permission_type))


def binding_fields(binding: AclBinding) -> dict[str, Any]:
    """A DeleteAcls matching ACL's fields (resource and entry)."""
    p, e = binding.pattern, binding.entry
    return {"resource_type": int(p.resource_type), "resource_name": p.name,
            "pattern_type": int(p.pattern_type), "principal": e.principal, "host": e.host,
            "operation": int(e.operation), "permission_type": int(e.permission)}
