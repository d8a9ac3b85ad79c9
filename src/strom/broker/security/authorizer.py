"""The ACL authorizer: Kafka's ``StandardAuthorizer`` rules over the ACLs in the metadata image.

A request by ``principal`` from ``host`` to perform ``operation`` on a resource is decided so:

1. a super user (``super.users``) may do anything;
2. the ACLs that apply to the resource are the LITERAL ones on its name, the LITERAL ones on
   ``*`` and the PREFIXED ones on any prefix of its name; of those, an entry applies to the
   request when its principal is the caller's or ``User:*`` and its host the caller's or ``*``;
3. any applying DENY of the operation (or of ALL) refuses — DENY wins;
4. else any applying ALLOW of the operation, of ALL, or of an operation that implies it
   (READ / WRITE / DELETE / ALTER imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS)
   allows;
5. else: allowed only if no ACL at all applies to the resource (whatever its principal) and
   ``allow.everyone.if.no.acl.found`` is true.

Lookups run on every request, so the image's ACLs are indexed once per change of the image's
``acls`` (by identity): literal entries by (type, name), prefixed entries by (type, prefix) with
the set of prefix lengths per type, so one decision costs a few dict lookups plus one per
distinct prefix length. Owned by the event-loop thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from strom.broker.security.principal import ANONYMOUS
from strom.common.acl import (
    IMPLIED_BY_ALLOW,
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strom.common.config import BrokerConfig
from strom.common.errors import StromError

log = logging.getLogger("strom.broker.authorizer")

#: ``authorizer.class.name`` values that turn the ACL authorizer on.
AUTHORIZER_NAMES = frozenset({
    "acls",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
})

AclMap = Mapping[ResourcePattern, frozenset[AccessControlEntry]]


class AuthorizerConfigError(StromError):
    """``authorizer.class.name`` or ``super.users`` cannot be used."""


def parse_super_users(text: str) -> frozenset[str]:
    """``User:a;User:b`` → the principals; each must be ``<type>:<name>``."""
    users = [u.strip() for u in text.split(";") if u.strip()]
    for user in users:
        kind, sep, name = user.partition(":")
        if not (kind and sep and name):
            raise AuthorizerConfigError(
                f"super.users: {user!r} is not a principal (<type>:<name>, e.g. User:admin)")
    return frozenset(users)


@dataclass(slots=True)
class _Index:
    literal: dict[tuple[ResourceType, str], tuple[AccessControlEntry, ...]] = field(
        default_factory=dict)
    prefixed: dict[tuple[ResourceType, str], tuple[AccessControlEntry, ...]] = field(
        default_factory=dict)
    prefix_lengths: dict[ResourceType, tuple[int, ...]] = field(default_factory=dict)

    @classmethod
    def build(cls, acls: AclMap) -> _Index:
        index = cls()
        lengths: dict[ResourceType, set[int]] = {}
        for pattern, entries in acls.items():
            key = (pattern.resource_type, pattern.name)
            if pattern.pattern_type == PatternType.PREFIXED:
                index.prefixed[key] = tuple(entries)
                lengths.setdefault(pattern.resource_type, set()).add(len(pattern.name))
            else:
                index.literal[key] = tuple(entries)
        index.prefix_lengths = {t: tuple(sorted(n)) for t, n in lengths.items()}
        return index

    def applying(self, resource_type: ResourceType, name: str
                 ) -> Iterator[tuple[AccessControlEntry, ...]]:
        """The entry lists of every pattern that applies to the resource."""
        for key in ((resource_type, name), (resource_type, WILDCARD)):
            entries = self.literal.get(key)
            if entries:
                yield entries
        for length in self.prefix_lengths.get(resource_type, ()):
            if length > len(name):
                break
            entries = self.prefixed.get((resource_type, name[:length]))
            if entries:
                yield entries


class Authorizer:
    """Decides requests against the ACLs that ``acls`` returns (the current image's)."""

    def __init__(self, acls: Callable[[], AclMap], super_users: frozenset[str] = frozenset(),
                 allow_if_no_acl: bool = False) -> None:
        self._acls = acls
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._indexed: AclMap | None = None
        self._index = _Index()

    @classmethod
    def from_config(cls, config: BrokerConfig, acls: Callable[[], AclMap]) -> Authorizer | None:
        """The configured authorizer, None when ``authorizer.class.name`` is empty; raises
        :class:`AuthorizerConfigError` for an unknown class name or bad super users."""
        name = str(config.get("authorizer.class.name") or "").strip()
        if not name:
            return None
        if name not in AUTHORIZER_NAMES:
            raise AuthorizerConfigError(
                f"authorizer.class.name={name!r} is not an authorizer strom has; use "
                f"{' or '.join(sorted(AUTHORIZER_NAMES))} (ACLs), or leave it empty")
        return cls(acls, parse_super_users(str(config.get("super.users") or "")),
                   bool(config.get("allow.everyone.if.no.acl.found")))

    def warn_about_broker_principal(self, principal: str | None) -> None:
        """strom's own connections (transaction markers to partition leaders) come through
        the inter-broker listener as ``principal`` (``User:ANONYMOUS`` on PLAINTEXT, the SASL
        user; None: a TLS certificate's subject, not checked here); as in Kafka that
        principal must be a super user (or be granted CLUSTER_ACTION on the cluster) for them
        to be accepted."""
        if principal is not None and principal not in self.super_users:
            log.warning(
                "ACLs are on: the broker's own requests on the inter-broker listener "
                "(transaction markers) come as %s, which is not in super.users; unless ACLs "
                "allow it CLUSTER_ACTION on the cluster, transactions will not complete. Add "
                "it to super.users%s.", principal,
                " and keep that listener private" if principal == ANONYMOUS else "")

    def acls(self) -> AclMap:
        """The ACLs decisions are made against (the current image's)."""
        return self._acls()

    def _current(self) -> _Index:
        acls = self._acls()
        if acls is not self._indexed:
            self._index = _Index.build(acls)
            self._indexed = acls
        return self._index

    def authorize(self, principal: str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        found = allowed = False
        for entries in self._current().applying(resource_type, name):
            found = True
            for entry in entries:
                if entry.principal != principal and entry.principal != WILDCARD_PRINCIPAL:
                    continue
                if entry.host != host and entry.host != WILDCARD:
                    continue
                op = entry.operation
                if entry.permission == AclPermissionType.DENY:
                    if op == operation or op == AclOperation.ALL:
                        return False
                elif (op == operation or op == AclOperation.ALL
                      or op in IMPLIED_BY_ALLOW.get(operation, ())):
                    allowed = True
        return allowed or (not found and self.allow_if_no_acl)

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType,
                              name: str) -> frozenset[AclOperation]:
        """The operations of the resource type that the caller may perform on the resource."""
        return frozenset(op for op in SUPPORTED_OPERATIONS[resource_type]
                         if self.authorize(principal, host, op, resource_type, name))
