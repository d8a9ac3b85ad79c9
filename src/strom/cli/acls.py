"""``strom acls add|list|remove``: ACLs (CreateAcls / DescribeAcls / DeleteAcls), with the
options of Kafka's ``kafka-acls.sh``.

Resources: ``--topic``, ``--group``, ``--transactional-id`` (each repeatable),
``--cluster``, ``--delegation-token``, ``--user-principal``, with ``--resource-pattern-type``
(``literal`` / ``prefixed`` to add and remove, also ``any`` / ``match`` to list and remove;
default literal, and any for ``list``). Entries: ``--allow-principal`` / ``--deny-principal``
(repeatable, ``User:name``; ``User:*`` everyone), ``--allow-host`` / ``--deny-host``
(default ``*``), ``--operation`` (repeatable, Kafka's names — Read, Write, Create, Delete,
Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite,
CreateTokens, DescribeTokens, All; default All). ``--producer`` (WRITE, DESCRIBE, CREATE on the
topics; WRITE, DESCRIBE on the transactional ids; IDEMPOTENT_WRITE on the cluster with
``--idempotent``) and ``--consumer`` (READ, DESCRIBE on the topics, READ on the groups) are
kafka-acls.sh's shortcuts. ``remove`` without principals removes every ACL of the resources;
``list`` prints Kafka's lines (``Current ACLs for resource `ResourcePattern(...)`:``).
A broker without an authorizer refuses all three (SECURITY_DISABLED, as Kafka): the command
prints kafka-acls.sh's ``Error while executing ACL command: No Authorizer is configured…``
and exits with status 1.
A TLS or SASL listener is reached with Kafka's client properties in ``--command-config``
(``security.protocol``, ``sasl.*``, as ``strom users``); the connection's principal needs
ALTER (add, remove) or DESCRIBE (list) on the cluster.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable

from strom.cli.client_props import add_client_config, admin_options
from strom.cli.common import UsageError
from strom.client.sync import SyncAdminClient
from strom.common.acl import (
    CLUSTER_NAME,
    WILDCARD,
    AccessControlEntry,
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strom.common.errors import error_class

#: kafka-acls.sh's operation names (``ClusterAction``) → codes.
OPERATIONS = {"".join(p.capitalize() for p in op.name.split("_")): op
              for op in AclOperation if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}
_RESOURCE_OPTIONS = "--topic, --group, --cluster, --transactional-id, --delegation-token, " \
                    "--user-principal"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("acls", help="add, list and remove ACLs",
                       description="Manage ACLs (as kafka-acls.sh). The broker needs an "
                                   "authorizer (authorizer.class.name=acls): without one it "
                                   "refuses ACLs, as Kafka does.")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    for name, run, text in (("add", run_add, "add ACLs"),
                            ("list", run_list, "list ACLs"),
                            ("remove", run_remove, "remove ACLs")):
        a = actions.add_parser(name, help=text)
        _resource_options(a, listing=name == "list")
        if name == "list":
            a.add_argument("--principal", action="append", default=[],
                           help="only ACLs of this principal; repeatable")
        else:
            _entry_options(a)
        if name == "remove":
            a.add_argument("--force", action="store_true",
                           help="accepted for kafka-acls.sh compatibility (never asks)")
        add_client_config(a, "admin")
        a.set_defaults(run=_security_disabled_as_kafka(run))


def _resource_options(parser: argparse.ArgumentParser, *, listing: bool) -> None:
    parser.add_argument("--topic", action="append", default=[], help="a topic; repeatable")
    parser.add_argument("--group", action="append", default=[], help="a group; repeatable")
    parser.add_argument("--transactional-id", action="append", default=[],
                        help="a transactional id; repeatable")
    parser.add_argument("--cluster", action="store_true", help="the cluster")
    parser.add_argument("--delegation-token", action="append", default=[],
                        help="a delegation token id; repeatable")
    parser.add_argument("--user-principal", action="append", default=[],
                        help="a user principal (for token ACLs); repeatable")
    kinds = ["literal", "prefixed", "any", "match"]
    parser.add_argument("--resource-pattern-type", type=str.lower, choices=kinds,
                        default="any" if listing else "literal",
                        help="how resource names match (default "
                             f"{'any' if listing else 'literal'})")


def _entry_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-principal", action="append", default=[],
                        help="principal to allow (User:name); repeatable")
    parser.add_argument("--deny-principal", action="append", default=[],
                        help="principal to deny (User:name); repeatable")
    parser.add_argument("--allow-host", action="append", default=[],
                        help="host the allowed principals may come from (default *)")
    parser.add_argument("--deny-host", action="append", default=[],
                        help="host the denied principals are denied from (default *)")
    parser.add_argument("--operation", action="append", default=[],
                        help=f"operation; repeatable ({', '.join(OPERATIONS)}; default All)")
    parser.add_argument("--producer", action="store_true",
                        help="the ACLs a producer needs on the topics / transactional ids")
    parser.add_argument("--idempotent", action="store_true",
                        help="with --producer: IDEMPOTENT_WRITE on the cluster too")
    parser.add_argument("--consumer", action="store_true",
                        help="the ACLs a consumer needs on the topics and groups")


def _security_disabled_as_kafka(run: Callable[[argparse.Namespace], int]
                                ) -> Callable[[argparse.Namespace], int]:
    """``run``, printing kafka-acls.sh's line when the broker has no authorizer."""

    def wrapped(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except error_class("SECURITY_DISABLED") as exc:
            print(f"Error while executing ACL command: {exc.message}", file=sys.stderr)
            return 1

    return wrapped


def _operation(name: str) -> AclOperation:
    for key, op in OPERATIONS.items():
        if key.lower() == name.replace("_", "").replace("-", "").lower():
            return op
    raise UsageError(f"unknown operation {name!r}; one of {', '.join(OPERATIONS)}")


def _patterns(args: argparse.Namespace, kind: PatternType) -> list[ResourcePattern]:
    names: list[tuple[ResourceType, str]] = [
        *((ResourceType.TOPIC, n) for n in args.topic),
        *((ResourceType.GROUP, n) for n in args.group),
        *((ResourceType.TRANSACTIONAL_ID, n) for n in args.transactional_id),
        *((ResourceType.DELEGATION_TOKEN, n) for n in args.delegation_token),
        *((ResourceType.USER, n) for n in args.user_principal)]
    if args.cluster:
        names.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return [ResourcePattern(t, n, PatternType.LITERAL if t == ResourceType.CLUSTER else kind)
            for t, n in names]


def _entries(args: argparse.Namespace, operations: Iterable[AclOperation]
             ) -> list[AccessControlEntry]:
    out = []
    for principals, hosts, permission in (
            (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
            (args.deny_principal, args.deny_host, AclPermissionType.DENY)):
        for principal in principals:
            if ":" not in principal:
                raise UsageError(f"principal {principal!r} must be <type>:<name> "
                                 "(User:alice; User:* for everyone)")
            for host in hosts or [WILDCARD]:
                out += [AccessControlEntry(principal, host, op, permission)
                        for op in operations]
    return out


def _bindings(args: argparse.Namespace, patterns: list[ResourcePattern]) -> list[AclBinding]:
    """The ACLs ``add`` / ``remove`` name (with --producer / --consumer expanded)."""
    OP, T = AclOperation, ResourceType
    if args.producer or args.consumer:
        if args.operation:
            raise UsageError("--operation does not combine with --producer / --consumer")
        wanted: dict[ResourceType, tuple[AclOperation, ...]] = {}
        if args.producer:
            wanted = {T.TOPIC: (OP.WRITE, OP.DESCRIBE, OP.CREATE),
                      T.TRANSACTIONAL_ID: (OP.WRITE, OP.DESCRIBE)}
        if args.consumer:
            wanted[T.TOPIC] = tuple(dict.fromkeys(
                (*wanted.get(T.TOPIC, ()), OP.READ, OP.DESCRIBE)))
            wanted[T.GROUP] = (OP.READ,)
        out = [AclBinding(p, e) for p in patterns
               for e in _entries(args, wanted.get(p.resource_type, ()))]
        if args.producer and args.idempotent:
            cluster = ResourcePattern(T.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)
            out += [AclBinding(cluster, e) for e in _entries(args, [OP.IDEMPOTENT_WRITE])]
        return out
    operations = [_operation(o) for o in args.operation] or [OP.ALL]
    return [AclBinding(p, e) for p in patterns for e in _entries(args, operations)]


def _admin(args: argparse.Namespace) -> SyncAdminClient:
    return SyncAdminClient(**admin_options(args))


def _print(bindings: Iterable[AclBinding]) -> None:
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in bindings:
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    for p, entries in by_pattern.items():
        print(f"Current ACLs for resource `ResourcePattern(resourceType={p.resource_type.name}, "
              f"name={p.name}, patternType={p.pattern_type.name})`: ")
        for e in entries:
            print(f" \t(principal={e.principal}, host={e.host}, operation={e.operation.name}, "
                  f"permissionType={e.permission.name})")
        print()


def run_add(args: argparse.Namespace) -> int:
    kind = PatternType[args.resource_pattern_type.upper()]
    if kind not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError("A '--resource-pattern-type' value of 'any' or 'match' is not valid "
                         "when adding acls.")
    patterns = _patterns(args, kind)
    if not patterns:
        raise UsageError(f"You must specify one of: {_RESOURCE_OPTIONS}")
    if not args.allow_principal and not args.deny_principal:
        raise UsageError("You must specify one of: --allow-principal, --deny-principal when "
                         "trying to add ACLs.")
    bindings = _bindings(args, patterns)
    if not bindings:
        raise UsageError("these options name no ACL for these resources")
    with _admin(args) as admin:
        admin.create_acls(bindings)
    print("Adding ACLs:")
    _print(bindings)
    return 0


def run_remove(args: argparse.Namespace) -> int:
    kind = PatternType[args.resource_pattern_type.upper()]
    patterns = _patterns(args, kind)
    if not patterns:
        raise UsageError(f"You must specify one of: {_RESOURCE_OPTIONS}")
    if args.allow_principal or args.deny_principal:
        filters = [_exact(b) for b in _bindings(args, patterns)]
    else:  # every ACL of the resources
        filters = [AclFilter(p.resource_type, p.name, p.pattern_type) for p in patterns]
    with _admin(args) as admin:
        removed = admin.delete_acls(filters)
    print("Removed ACLs:" if removed else "No ACLs matched.")
    _print(removed)
    return 0


def _exact(binding: AclBinding) -> AclFilter:
    p, e = binding.pattern, binding.entry
    return AclFilter(p.resource_type, p.name, p.pattern_type, e.principal, e.host,
                     e.operation, e.permission)


def run_list(args: argparse.Namespace) -> int:
    kind = PatternType[args.resource_pattern_type.upper()]
    patterns = _patterns(args, kind)
    filters = [AclFilter(p.resource_type, p.name, p.pattern_type) for p in patterns] or [
        AclFilter(pattern_type=kind)]
    found: list[AclBinding] = []
    with _admin(args) as admin:
        for f in filters:
            found += admin.describe_acls(f)
    principals = set(args.principal)
    _print(sorted({b for b in found if not principals or b.entry.principal in principals}))
    return 0
