"""Authorization of requests: the declared per-API rule table and the one helper handlers ask.

:data:`RULES` says, per API, which operation on which resource type Kafka's ``KafkaApis``
requires and which error a refusal answers. Handlers never name operations: they ask
:meth:`Access.allowed` about the resources a request names (``allowed(request, TOPIC, name)``)
and put the rule's error where the response shape has it (per partition, per group, per
request). Rules marked ``extra`` are second checks of the same API on another occasion
(Metadata's auto-create, CreateTopics' cluster-wide CREATE); handlers ask for them by
operation.

Without an authorizer (``authorizer.class.name`` empty) everything is allowed, as before ACLs.
"""

from __future__ import annotations

from dataclasses import dataclass

from strom.broker.dispatch import Request
from strom.broker.security.authorizer import Authorizer
from strom.common.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclOperation,
    AclPermissionType,
    ResourceType,
)
from strom.common.errors import error_class
from strom.protocol.versions import ApiKey

_T, _G, _C, _X = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                  ResourceType.TRANSACTIONAL_ID)
_OP = AclOperation
_ERRORS = {_T: "TOPIC_AUTHORIZATION_FAILED", _G: "GROUP_AUTHORIZATION_FAILED",
           _C: "CLUSTER_AUTHORIZATION_FAILED", _X: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"}
#: The refusal codes on the wire (29, 30, 31, 53).
TOPIC_DENIED = error_class(_ERRORS[_T]).code
GROUP_DENIED = error_class(_ERRORS[_G]).code
CLUSTER_DENIED = error_class(_ERRORS[_C]).code
TXN_ID_DENIED = error_class(_ERRORS[_X]).code
TopicDenied = error_class(_ERRORS[_T])  # raised where a handler's flow uses exceptions


@dataclass(frozen=True, slots=True)
class Rule:
    resource: ResourceType
    operation: AclOperation

    @property
    def error(self) -> str:
        return _ERRORS[self.resource]


def _r(*pairs: tuple[ResourceType, AclOperation]) -> tuple[Rule, ...]:
    return tuple(Rule(t, op) for t, op in pairs)


#: What each API requires (Kafka's KafkaApis). The first rule of a resource type is the one
#: :meth:`Access.allowed` applies when no operation is named.
RULES: dict[int, tuple[Rule, ...]] = {
    ApiKey.PRODUCE: _r((_T, _OP.WRITE), (_X, _OP.WRITE)),
    ApiKey.FETCH: _r((_T, _OP.READ), (_C, _OP.CLUSTER_ACTION)),
    ApiKey.LIST_OFFSETS: _r((_T, _OP.DESCRIBE)),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _r((_T, _OP.DESCRIBE), (_C, _OP.CLUSTER_ACTION)),
    ApiKey.METADATA: _r((_T, _OP.DESCRIBE), (_T, _OP.CREATE), (_C, _OP.CREATE)),
    ApiKey.OFFSET_COMMIT: _r((_G, _OP.READ), (_T, _OP.READ)),
    ApiKey.OFFSET_FETCH: _r((_G, _OP.DESCRIBE), (_T, _OP.DESCRIBE)),
    ApiKey.FIND_COORDINATOR: _r((_G, _OP.DESCRIBE), (_X, _OP.DESCRIBE)),
    ApiKey.JOIN_GROUP: _r((_G, _OP.READ)),
    ApiKey.HEARTBEAT: _r((_G, _OP.READ)),
    ApiKey.LEAVE_GROUP: _r((_G, _OP.READ)),
    ApiKey.SYNC_GROUP: _r((_G, _OP.READ)),
    ApiKey.DESCRIBE_GROUPS: _r((_G, _OP.DESCRIBE)),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: _r((_G, _OP.READ)),
    ApiKey.CONSUMER_GROUP_DESCRIBE: _r((_G, _OP.DESCRIBE)),
    ApiKey.LIST_GROUPS: _r((_G, _OP.DESCRIBE), (_C, _OP.DESCRIBE)),
    ApiKey.CREATE_TOPICS: _r((_T, _OP.CREATE), (_C, _OP.CREATE)),
    ApiKey.DELETE_TOPICS: _r((_T, _OP.DELETE), (_T, _OP.DESCRIBE)),
    ApiKey.DELETE_RECORDS: _r((_T, _OP.DELETE)),
    ApiKey.INIT_PRODUCER_ID: _r((_X, _OP.WRITE), (_C, _OP.IDEMPOTENT_WRITE)),
    ApiKey.ADD_PARTITIONS_TO_TXN: _r((_X, _OP.WRITE), (_T, _OP.WRITE)),
    ApiKey.ADD_OFFSETS_TO_TXN: _r((_X, _OP.WRITE), (_G, _OP.READ)),
    ApiKey.END_TXN: _r((_X, _OP.WRITE)),
    ApiKey.TXN_OFFSET_COMMIT: _r((_X, _OP.WRITE), (_G, _OP.READ), (_T, _OP.READ)),
    ApiKey.WRITE_TXN_MARKERS: _r((_C, _OP.CLUSTER_ACTION)),
    ApiKey.CONTROLLED_SHUTDOWN: _r((_C, _OP.CLUSTER_ACTION)),
    ApiKey.ELECT_LEADERS: _r((_C, _OP.ALTER)),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _r((_C, _OP.ALTER)),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _r((_C, _OP.DESCRIBE)),
    ApiKey.DESCRIBE_CONFIGS: _r((_T, _OP.DESCRIBE_CONFIGS), (_C, _OP.DESCRIBE_CONFIGS)),
    ApiKey.ALTER_CONFIGS: _r((_T, _OP.ALTER_CONFIGS), (_C, _OP.ALTER_CONFIGS)),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _r((_T, _OP.ALTER_CONFIGS), (_C, _OP.ALTER_CONFIGS)),
    ApiKey.DESCRIBE_LOG_DIRS: _r((_C, _OP.DESCRIBE)),
    ApiKey.CREATE_PARTITIONS: _r((_T, _OP.ALTER)),
    ApiKey.DELETE_GROUPS: _r((_G, _OP.DELETE)),
    ApiKey.OFFSET_DELETE: _r((_G, _OP.DELETE), (_T, _OP.READ)),
    ApiKey.DESCRIBE_ACLS: _r((_C, _OP.DESCRIBE)),
    ApiKey.CREATE_ACLS: _r((_C, _OP.ALTER)),
    ApiKey.DELETE_ACLS: _r((_C, _OP.ALTER)),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: _r((_C, _OP.DESCRIBE_CONFIGS)),
    ApiKey.ALTER_CLIENT_QUOTAS: _r((_C, _OP.ALTER_CONFIGS)),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _r((_C, _OP.DESCRIBE)),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _r((_C, _OP.ALTER)),
    ApiKey.DESCRIBE_PRODUCERS: _r((_T, _OP.READ)),
    ApiKey.DESCRIBE_TRANSACTIONS: _r((_X, _OP.DESCRIBE), (_T, _OP.DESCRIBE)),
    ApiKey.LIST_TRANSACTIONS: _r((_X, _OP.DESCRIBE)),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: _r((_T, _OP.DESCRIBE)),
    ApiKey.LIST_CONFIG_RESOURCES: _r((_C, _OP.DESCRIBE_CONFIGS)),
}
#: APIs any authenticated connection may use (Kafka checks nothing, or only reports
#: authorized operations): ApiVersions, SaslHandshake, SaslAuthenticate, DescribeCluster.
UNCHECKED = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE,
                       ApiKey.DESCRIBE_CLUSTER})


_CONFIG_TOPIC, _CONFIG_BROKER = 2, 4  # ConfigResource types


def host_of(peer: str) -> str:
    """The address part of ``host:port`` (IPv6 addresses keep their colons)."""
    return peer.rpartition(":")[0] or peer


class Access:
    """One per broker. ``authorizer`` None: no authorizer, everything allowed."""

    def __init__(self, authorizer: Authorizer | None) -> None:
        self.authorizer = authorizer

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    def rule(self, request: Request, resource: ResourceType,
             operation: AclOperation | None = None) -> Rule:
        for rule in RULES.get(request.header.api_key, ()):
            if rule.resource == resource and operation in (None, rule.operation):
                return rule
        raise KeyError(f"no rule of {ApiKey(request.header.api_key).name} for "
                       f"{resource.name} {operation}")

    def allowed(self, request: Request, resource: ResourceType, name: str = CLUSTER_NAME,
                operation: AclOperation | None = None) -> bool:
        """Whether the caller may do what this API requires on the resource (``operation``:
        one of the API's extra rules)."""
        authorizer = self.authorizer
        if authorizer is None:
            return True
        rule = self.rule(request, resource, operation)
        conn = request.conn
        return authorizer.authorize(conn.principal, host_of(conn.peer), rule.operation,
                                    resource, name)

    def error_code(self, request: Request, resource: ResourceType) -> int:
        """The error code this API answers when ``resource`` is refused."""
        return error_class(self.rule(request, resource).error).code

    def check(self, request: Request, resource: ResourceType, name: str = CLUSTER_NAME,
              operation: AclOperation | None = None) -> int:
        """0 when allowed, else the rule's error code."""
        if self.allowed(request, resource, name, operation):
            return 0
        return error_class(self.rule(request, resource, operation).error).code

    def config_refusal(self, request: Request, config_resource_type: int, name: str) -> int:
        """Describe/AlterConfigs: the error for a config resource (type 2 a topic, 4 a broker
        — checked on the cluster), 0 when allowed or when the type is not one of those."""
        if config_resource_type == _CONFIG_TOPIC:
            return self.check(request, _T, name)
        if config_resource_type == _CONFIG_BROKER:
            return self.check(request, _C)
        return 0

    def operations(self, request: Request, resource: ResourceType,
                   name: str = CLUSTER_NAME) -> frozenset[AclOperation]:
        """The caller's authorized operations on the resource (every supported one without
        an authorizer, as Kafka)."""
        if self.authorizer is None:
            return SUPPORTED_OPERATIONS[resource]
        conn = request.conn
        return self.authorizer.authorized_operations(conn.principal, host_of(conn.peer),
                                                     resource, name)

    def any_allowed(self, request: Request, resource: ResourceType,
                    operation: AclOperation) -> bool:
        """Kafka's ``authorizeByResourceType``: may the caller perform ``operation`` on at
        least one resource of the type (an ALLOW that applies to the caller, unless a DENY
        of every resource of the type — LITERAL ``*`` — applies too)."""
        authorizer = self.authorizer
        if authorizer is None:
            return True
        conn = request.conn
        principal, host = conn.principal, host_of(conn.peer)
        if principal in authorizer.super_users:
            return True
        if authorizer.authorize(principal, host, operation, resource, WILDCARD):
            return True
        found = False
        for pattern, entries in authorizer.acls().items():
            if pattern.resource_type != resource:
                continue
            found = True
            if any(e.permission == AclPermissionType.ALLOW
                   and e.principal in (principal, WILDCARD_PRINCIPAL)
                   and e.host in (host, WILDCARD)
                   and e.operation in (operation, AclOperation.ALL) for e in entries) and (
                    authorizer.authorize(principal, host, operation, resource, pattern.name)):
                return True
        return not found and authorizer.allow_if_no_acl
