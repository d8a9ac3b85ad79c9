"""Authorized operations reported by Metadata, DescribeCluster and DescribeGroups.

Kafka reports, for a resource, the operations the caller may perform on it, as a 32-bit field
of AclOperation codes (the protocol adapter encodes a set of codes; None encodes INT32_MIN,
Kafka's "not requested"). Without an authorizer Kafka allows every operation its ACLs support
for the resource type (``AclEntry.supportedOperations``); strom has no authorizer yet, so
these are the sets reported.
"""

from __future__ import annotations

import enum


class AclOperation(enum.IntEnum):
    """Kafka's AclOperation codes."""

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


_OP = AclOperation
TOPIC_OPERATIONS = frozenset({_OP.READ, _OP.WRITE, _OP.CREATE, _OP.DESCRIBE, _OP.DELETE,
                              _OP.ALTER, _OP.DESCRIBE_CONFIGS, _OP.ALTER_CONFIGS})
GROUP_OPERATIONS = frozenset({_OP.READ, _OP.DESCRIBE, _OP.DELETE})
CLUSTER_OPERATIONS = frozenset({_OP.CREATE, _OP.CLUSTER_ACTION, _OP.DESCRIBE_CONFIGS,
                                _OP.ALTER_CONFIGS, _OP.IDEMPOTENT_WRITE, _OP.ALTER,
                                _OP.DESCRIBE})
NOT_REQUESTED = None


def authorized(operations: frozenset[AclOperation], requested: bool) -> set[int] | None:
    """The field's value: the operations' codes when the client asked for them."""
    return {int(op) for op in operations} if requested else NOT_REQUESTED
