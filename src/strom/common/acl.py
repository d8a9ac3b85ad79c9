"""ACLs as Kafka models them (KIP-11, KIP-290): who may do what to which resources.

An ACL binding is a *resource pattern* (resource type, name, pattern type) plus an *access
control entry* (principal, host, operation, permission). Kafka's wire codes are the enum
values (CreateAcls / DescribeAcls / DeleteAcls carry them as int8):

* ``ResourceType``: UNKNOWN 0, ANY 1, TOPIC 2, GROUP 3, CLUSTER 4, TRANSACTIONAL_ID 5,
  DELEGATION_TOKEN 6, USER 7 (the cluster resource is always named ``kafka-cluster``).
* ``PatternType``: UNKNOWN 0, ANY 1, MATCH 2, LITERAL 3, PREFIXED 4. A stored binding is
  LITERAL (the name ``*`` matches every resource of its type) or PREFIXED (the name is a
  prefix); ANY and MATCH exist only in filters.
* ``AclOperation``: UNKNOWN 0, ANY 1, ALL 2, READ 3 … DESCRIBE_TOKENS 14.
* ``AclPermissionType``: UNKNOWN 0, ANY 1, DENY 2, ALLOW 3.

Principals are ``<type>:<name>`` (``User:alice``; ``User:*`` matches every user); the host
``*`` matches every host. Filters (:class:`AclFilter`) use None for "any" in the text fields
and ANY in the codes, as the DescribeAcls / DeleteAcls requests do.

Imported by the broker, the metadata image and the client, so it depends on nothing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_OP = AclOperation
#: The operations an ACL may name per resource type (Kafka's ``AclEntry.supportedOperations``,
#: without ALL), which is also what "authorized operations" can report.
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({_OP.READ, _OP.WRITE, _OP.CREATE, _OP.DESCRIBE, _OP.DELETE,
                                   _OP.ALTER, _OP.DESCRIBE_CONFIGS, _OP.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({_OP.READ, _OP.DESCRIBE, _OP.DELETE}),
    ResourceType.CLUSTER: frozenset({_OP.CREATE, _OP.CLUSTER_ACTION, _OP.DESCRIBE_CONFIGS,
                                     _OP.ALTER_CONFIGS, _OP.IDEMPOTENT_WRITE, _OP.ALTER,
                                     _OP.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({_OP.DESCRIBE, _OP.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({_OP.DESCRIBE}),
    ResourceType.USER: frozenset({_OP.CREATE_TOKENS, _OP.DESCRIBE_TOKENS}),
}

#: An ALLOW of the key also allows these (Kafka: READ, WRITE, DELETE and ALTER imply
#: DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS). DENY entries imply nothing.
IMPLIED_BY_ALLOW: dict[AclOperation, frozenset[AclOperation]] = {
    _OP.DESCRIBE: frozenset({_OP.READ, _OP.WRITE, _OP.DELETE, _OP.ALTER}),
    _OP.DESCRIBE_CONFIGS: frozenset({_OP.ALTER_CONFIGS}),
}


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    """What an ACL applies to: LITERAL ``name`` (``*``: every resource of the type) or
    PREFIXED (every resource whose name starts with ``name``)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType


@dataclass(frozen=True, slots=True, order=True)
class AccessControlEntry:
    """Who (``principal``, ``User:*`` = everyone) from where (``host``, ``*`` = anywhere) may
    (ALLOW) or may not (DENY) perform ``operation`` (ALL = every operation)."""

    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True, slots=True)
class AclFilter:
    """A DescribeAcls / DeleteAcls filter. None text fields and ANY codes match anything;
    pattern type MATCH matches the bindings that would apply to the resource ``name``
    (literal equal, literal ``*``, prefixes of it), ANY every pattern type with that
    exact name."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches(self, binding: AclBinding) -> bool:
        p, e = binding.pattern, binding.entry
        if self.resource_type != ResourceType.ANY and p.resource_type != self.resource_type:
            return False
        if not self._pattern_matches(p):
            return False
        if self.principal is not None and e.principal != self.principal:
            return False
        if self.host is not None and e.host != self.host:
            return False
        if self.operation != AclOperation.ANY and e.operation != self.operation:
            return False
        return self.permission == AclPermissionType.ANY or e.permission == self.permission

    def _pattern_matches(self, p: ResourcePattern) -> bool:
        kind = self.pattern_type
        if kind == PatternType.MATCH:
            if self.name is None:
                return True
            if p.pattern_type == PatternType.LITERAL:
                return p.name in (self.name, WILDCARD)
            return p.pattern_type == PatternType.PREFIXED and self.name.startswith(p.name)
        if kind not in (PatternType.ANY, p.pattern_type):
            return False
        return self.name is None or p.name == self.name

    def problem(self) -> str | None:
        """Why this filter is unusable (an UNKNOWN code), or None."""
        for what, value in (("resource type", self.resource_type),
                            ("pattern type", self.pattern_type),
                            ("operation", self.operation),
                            ("permission type", self.permission)):
            if value == 0:
                return f"the filter's {what} is UNKNOWN"
        return None


def binding_problem(binding: AclBinding) -> str | None:
    """Why ``binding`` cannot be stored (Kafka's checks on CreateAcls), or None."""
    p, e = binding.pattern, binding.entry
    if p.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return "Invalid resource type"
    if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "Invalid pattern type: resource patterns must be LITERAL or PREFIXED"
    if not p.name:
        return "Resource name must not be empty"
    if p.resource_type == ResourceType.CLUSTER and (
            p.name != CLUSTER_NAME or p.pattern_type != PatternType.LITERAL):
        return "The only valid name for the CLUSTER resource is kafka-cluster"
    if p.pattern_type == PatternType.PREFIXED and p.name == WILDCARD:
        return "A PREFIXED pattern cannot be the wildcard '*'"
    if e.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return "Invalid operation"
    if e.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return "Invalid permission type"
    if e.operation != AclOperation.ALL and (
            e.operation not in SUPPORTED_OPERATIONS.get(p.resource_type, frozenset())):
        return (f"Operation {e.operation.name} is not supported by resource type "
                f"{p.resource_type.name}")
    kind, sep, name = e.principal.partition(":")
    if not sep or not kind or not name:
        return f"Could not parse principal {e.principal!r}: expected <type>:<name>"
    if not e.host:
        return "Host must not be empty"
    return None
