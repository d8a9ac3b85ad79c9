"""``strom configs`` for quota entities, as ``kafka-configs.sh --bootstrap-server`` does them:
``--entity-type users|clients|ips`` with ``--entity-name NAME`` or ``--entity-default``
(describe also without either: every entity of the type).

``describe`` prints kafka-configs.sh's lines (``Quota configs for ip '127.0.0.1' are
connection_creation_rate=10.0``; ``the default ip``; nothing when none is set). ``alter``
takes ``--add-config k=v,k=v`` / ``--delete-config k,k`` (or ``--set`` / ``--delete``) and
prints ``Completed updating config for ip 127.0.0.1.`` or ``Completed updating default
config for ips in the cluster.``. As the Kafka tool: ``ips`` take only
``connection_creation_rate``, and deleting a key that is not set is ``Invalid config(s)``.
Combined user + client-id entities are ``strom quotas``' (``--entity-type`` repeated).
"""

from __future__ import annotations

import argparse

from strom.cli.common import UsageError, parse_key_values
from strom.client.quota_admin import Component, QuotaAlteration, default, exact, specified
from strom.client.sync import SyncAdminClient

#: kafka-configs.sh's entity types → the quota entity types on the wire.
QUOTA_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}
IP_KEYS = ("connection_creation_rate",)
_SHOWN = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}


def _component(entity_type: str, args: argparse.Namespace) -> Component:
    if args.entity_default:
        return default(entity_type)
    if args.entity_name is not None:
        return exact(entity_type, args.entity_name)
    return specified(entity_type)


def _describe_entity(entity: tuple[tuple[str, str | None], ...]) -> str:
    names = dict(entity)
    return ", ".join(
        f"{_SHOWN[t]} '{names[t]}'" if names[t] is not None else f"the default {_SHOWN[t]}"
        for t in ("user", "client-id", "ip") if t in names)


def describe(admin: SyncAdminClient, args: argparse.Namespace) -> None:
    entity_type = QUOTA_TYPES[args.entity_type]
    found = admin.describe_client_quotas([_component(entity_type, args)], strict=True)
    for entity, values in found.items():
        shown = ", ".join(f"{k}={v}" for k, v in values.items())
        print(f"Quota configs for {_describe_entity(entity)} are {shown}")


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def alter(admin: SyncAdminClient, args: argparse.Namespace) -> None:
    if args.entity_name is None and not args.entity_default:
        raise UsageError(f"--entity-type {args.entity_type} needs --entity-name or "
                         "--entity-default")
    entity_type = QUOTA_TYPES[args.entity_type]
    added = parse_key_values([*args.set, *_items(args.add_config)], "--add-config")
    deleted = [*(k.strip() for k in args.delete), *_items(args.delete_config)]
    if not added and not deleted:
        raise UsageError("nothing to alter: give --add-config k=v and/or --delete-config k")
    if entity_type == "ip" and (unexpected := [k for k in [*added, *deleted]
                                               if k not in IP_KEYS]):
        raise UsageError("Only connection quota configs can be added for 'ips' using "
                         f"--bootstrap-server. Unexpected config names: {','.join(unexpected)}")
    ops: dict[str, float | None] = {}
    for key, value in added.items():
        try:
            ops[key] = float(value)
        except ValueError:
            raise UsageError(f"--add-config {key}={value}: the value must be a number") from None
    name = None if args.entity_default else str(args.entity_name)
    if deleted:
        current = admin.describe_client_quotas(
            [_component(entity_type, args)], strict=True).get(((entity_type, name),), {})
        if missing := [k for k in deleted if k not in current]:
            raise UsageError(f"Invalid config(s): {','.join(missing)}")
        ops.update((k, None) for k in deleted)
    admin.alter_client_quotas([QuotaAlteration({entity_type: name}, ops)],
                              validate_only=args.validate_only)
    verb = "Validated" if args.validate_only else "Completed updating"
    if name is not None:
        print(f"{verb} config for {args.entity_type[:-1]} {name}.")
    else:
        print(f"{verb} default config for {args.entity_type} in the cluster.")
