"""``strom quotas describe|alter``: client quotas (DescribeClientQuotas /
AlterClientQuotas), with ``kafka-configs.sh``'s options for them.

An entity is given as ``--entity-type users|clients|ips`` followed by ``--entity-name NAME`` or
``--entity-default`` (Kafka's ``<default>``), once per type: ``--entity-type users
--entity-name alice --entity-type clients --entity-default`` is alice's default client id;
``ips`` stands alone (an IP address, or the default of every address).
``alter`` takes ``--add-config k=v,k=v`` (``producer_byte_rate``, ``consumer_byte_rate``,
``request_percentage``, ``controller_mutation_rate``; for ips ``connection_creation_rate``)
and / or ``--delete-config k,k``;
``--validate-only`` only checks. ``describe`` without an entity prints every entity's quotas;
with entity types, only entities naming exactly those types (a type without a name or
``--entity-default`` matches every entity of that type, the default one too), as
``kafka-configs.sh``.
"""

from __future__ import annotations

import argparse

from strom.cli.client_props import add_client_config, admin_options
from strom.cli.common import UsageError, parse_key_values
from strom.client.quota_admin import Component, QuotaAlteration, default, exact, specified
from strom.client.sync import SyncAdminClient

_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}
_UNSET = object()


def _entity_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--entity-type", action="append", choices=list(_TYPES), default=[],
                   help="users, clients (repeat for both, each followed by its name) or ips")
    p.add_argument("--entity-name", action="append", dest="entity_names",
                   help="the name of the entity type just given")
    p.add_argument("--entity-default", action="append_const", const=None,
                   dest="entity_names", help="the default entity of the type just given")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quotas", help="describe and alter client quotas",
                       description="Client quotas per user, client id or both.")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    d = actions.add_parser("describe", help="print client quotas")
    _entity_options(d)
    add_client_config(d, "admin")
    d.set_defaults(run=run_describe)
    a = actions.add_parser("alter", help="set or remove client quotas of one entity")
    _entity_options(a)
    a.add_argument("--add-config", default="", help="k=v[,k=v…]: quota keys to set")
    a.add_argument("--delete-config", default="", help="k[,k…]: quota keys to remove")
    a.add_argument("--validate-only", action="store_true", help="only check the request")
    add_client_config(a, "admin")
    a.set_defaults(run=run_alter)


def _entity(args: argparse.Namespace, need_names: bool) -> list[tuple[str, object]]:
    """(entity type, name / None for default / _UNSET) per --entity-type, in order."""
    names = list(args.entity_names or [])
    if len(names) > len(args.entity_type) or (need_names and len(names) != len(
            args.entity_type)):
        raise UsageError("each --entity-type needs one --entity-name or --entity-default")
    names += [_UNSET] * (len(args.entity_type) - len(names))
    return [(_TYPES[t], n) for t, n in zip(args.entity_type, names, strict=True)]


def _admin(args: argparse.Namespace) -> SyncAdminClient:
    return SyncAdminClient(**admin_options(args))


def _show(entity: tuple[tuple[str, str | None], ...]) -> str:
    return " ".join(f"{t}={'<default>' if n is None else n}" for t, n in entity)


def run_describe(args: argparse.Namespace) -> int:
    components: list[Component] = []
    for entity_type, name in _entity(args, need_names=False):
        if name is _UNSET:
            components.append(specified(entity_type))
        elif name is None:
            components.append(default(entity_type))
        else:
            components.append(exact(entity_type, str(name)))
    with _admin(args) as admin:
        found = admin.describe_client_quotas(components, strict=bool(components))
    if not found:
        print("(no client quotas)")
    for entity, values in found.items():
        print(f"{_show(entity)}: " + ",".join(f"{k}={v}" for k, v in sorted(values.items())))
    return 0


def run_alter(args: argparse.Namespace) -> int:
    entity = {t: (None if n is None else str(n)) for t, n in _entity(args, need_names=True)}
    if not entity:
        raise UsageError("alter needs --entity-type and --entity-name / --entity-default")
    ops: dict[str, float | None] = {}
    items = filter(None, (i.strip() for i in args.add_config.split(",")))
    for key, value in parse_key_values(items, "--add-config").items():
        try:
            ops[key] = float(value)
        except ValueError:
            raise UsageError(f"--add-config {key}={value}: the value must be a number") from None
    for key in filter(None, (k.strip() for k in args.delete_config.split(","))):
        ops[key] = None
    if not ops:
        raise UsageError("alter needs --add-config and / or --delete-config")
    with _admin(args) as admin:
        admin.alter_client_quotas([QuotaAlteration(entity, ops)],
                                  validate_only=args.validate_only)
    shown = _show(tuple(sorted(entity.items())))
    print(f"{'Validated' if args.validate_only else 'Altered'} client quotas of {shown}")
    return 0
