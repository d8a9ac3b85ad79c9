"""Authorized operations reported by Metadata, DescribeCluster and DescribeGroups.

Kafka reports, for a resource, the operations the caller may perform on it, as a 32-bit field
of AclOperation codes (the protocol adapter encodes a set of codes; None encodes INT32_MIN,
Kafka's "not requested"). With an authorizer these are the operations the ACLs allow the
caller (:meth:`strom.broker.access.Access.operations`); without one, every operation the
resource type supports (``AclEntry.supportedOperations``), as Kafka.
"""

from __future__ import annotations

from strom.broker.access import Access
from strom.broker.dispatch import Request
from strom.common.acl import CLUSTER_NAME, AclOperation, ResourceType

__all__ = ["NOT_REQUESTED", "AclOperation", "authorized"]

NOT_REQUESTED = None


def authorized(access: Access, request: Request, resource: ResourceType,
               name: str = CLUSTER_NAME, requested: bool = True) -> set[int] | None:
    """The field's value: the caller's operations' codes when the client asked for them."""
    if not requested:
        return NOT_REQUESTED
    return {int(op) for op in access.operations(request, resource, name)}
