"""``strom configs``: describe and alter topic and broker configuration, and quotas.

The entity is ``--topic NAME`` or ``--broker ID``, or as kafka-configs.sh names it:
``--entity-type topics|brokers`` with ``--entity-name NAME`` or (brokers) ``--entity-default``,
the cluster-wide default of every broker. Without ``--all``, describe lists what is set on
that entity: a topic's overrides, a broker's dynamic configs, the dynamic defaults.
``--entity-type users|clients|ips`` are client quotas and IP connection-rate quotas, with
kafka-configs.sh's options and output (:mod:`strom.cli.configs_quotas`)."""

from __future__ import annotations

import argparse

from strom.cli import configs_quotas
from strom.cli.client_props import add_client_config, admin_options
from strom.cli.common import UsageError, parse_key_values, warn_ignored_configs
from strom.client.admin_types import (
    AlterConfigOp,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from strom.client.sync import SyncAdminClient
from strom.common.config import BROKER_KEYS, TOPIC_KEYS, ConfigSource

ENTITY_TYPES = ("topics", "brokers", *configs_quotas.QUOTA_TYPES)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("configs", help="describe and alter topic / broker configs",
                       description="Describe and alter configuration of topics and brokers.")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    d = actions.add_parser("describe", help="show configuration")
    _add_entity(d)
    d.add_argument("--all", action="store_true",
                   help="every key with its effective value, not only overrides")
    d.add_argument("--synonyms", action="store_true",
                   help="show where each value comes from (synonyms, in precedence order)")
    add_client_config(d, "admin")
    d.set_defaults(run=run_describe, entity_parser=d)

    a = actions.add_parser("alter", help="set or delete config overrides")
    _add_entity(a)
    a.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="set an override; repeatable")
    a.add_argument("--delete", action="append", default=[], metavar="KEY",
                   help="remove an override (back to the default); repeatable")
    a.add_argument("--add-config", default="", metavar="K=V[,K=V]",
                   help="as kafka-configs.sh, for users / clients / ips: quotas to set")
    a.add_argument("--delete-config", default="", metavar="K[,K]",
                   help="as kafka-configs.sh, for users / clients / ips: quotas to remove")
    a.add_argument("--validate-only", action="store_true", help="check without applying")
    add_client_config(a, "admin")
    a.set_defaults(run=run_alter, entity_parser=a)


def _add_entity(parser: argparse.ArgumentParser) -> None:
    entity = parser.add_mutually_exclusive_group()
    entity.add_argument("--topic", metavar="NAME", help="a topic")
    entity.add_argument("--broker", metavar="ID", help="a broker id")
    entity.add_argument("--entity-type", choices=ENTITY_TYPES,
                        help="as kafka-configs.sh: with --entity-name or --entity-default "
                             "(users, clients, ips: quotas)")
    named = parser.add_mutually_exclusive_group()
    named.add_argument("--entity-name", metavar="NAME", help="the topic name or broker id")
    named.add_argument("--entity-default", action="store_true",
                       help="the cluster-wide default of every broker (dynamic configs), or "
                            "the default user / client / ip")


def _resource(args: argparse.Namespace) -> ConfigResource:
    usage = args.entity_parser.error  # exits with status 2, as argparse's own errors
    if args.entity_type is None:
        if args.entity_name is not None or args.entity_default:
            usage("--entity-name / --entity-default need --entity-type")
        if args.topic is not None:
            return ConfigResource.topic(args.topic)
        if args.broker is None:
            usage("name the entity: --topic, --broker or --entity-type")
        return _broker(args.broker, "--broker")
    if args.entity_default:
        if args.entity_type != "brokers":
            usage("--entity-default applies to --entity-type brokers, users, clients and ips")
        return ConfigResource.broker("")
    if args.entity_name is None:
        usage("--entity-type needs --entity-name (or --entity-default for brokers)")
    if args.entity_type == "topics":
        return ConfigResource.topic(args.entity_name)
    return _broker(args.entity_name, "--entity-name")


def _broker(broker_id: str, option: str) -> ConfigResource:
    if not str(broker_id).isdigit():
        raise UsageError(f"{option} expects a numeric broker id, got {broker_id!r}")
    return ConfigResource.broker(broker_id)


def _set_here(resource: ConfigResource) -> ConfigSource:
    """The source of what is set on the entity itself (what describe lists without --all)."""
    if resource.type == ResourceType.TOPIC:
        return ConfigSource.DYNAMIC_TOPIC_CONFIG
    if resource.name:
        return ConfigSource.DYNAMIC_BROKER_CONFIG
    return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG


def _title(resource: ConfigResource) -> str:
    if resource.type == ResourceType.TOPIC:
        return f"topic {resource.name}"
    return f"broker {resource.name}" if resource.name else "the brokers' cluster-wide default"


def _source_name(source: int) -> str:
    try:
        return ConfigSource(source).name
    except ValueError:
        return f"SOURCE_{source}"


def format_entry(entry: ConfigEntry, synonyms: bool) -> list[str]:
    value = "(sensitive)" if entry.sensitive else ("null" if entry.value is None else entry.value)
    flags = [_source_name(entry.source)]
    if entry.read_only:
        flags.append("read-only")
    lines = [f"  {entry.name}={value}  ({', '.join(flags)})"]
    if synonyms and entry.synonyms:
        chain = ", ".join(f"{_source_name(s.source)}:{s.name}={s.value}" for s in entry.synonyms)
        lines.append(f"      synonyms: {chain}")
    return lines


def _quota_entity(args: argparse.Namespace) -> bool:
    return args.entity_type in configs_quotas.QUOTA_TYPES


def run_describe(args: argparse.Namespace) -> int:
    if _quota_entity(args):
        with SyncAdminClient(**admin_options(args)) as admin:
            configs_quotas.describe(admin, args)
        return 0
    resource = _resource(args)
    with SyncAdminClient(**admin_options(args)) as admin:
        if resource.type == ResourceType.TOPIC:
            admin.describe_topics([resource.name])  # a clear error for a missing topic
        result = admin.describe_configs([resource], include_synonyms=args.synonyms)
    entries = result.get(resource, [])
    if not args.all:
        entries = [e for e in entries if e.source == _set_here(resource)]
    scope = "all configs" if args.all else (
        "overrides" if resource.type == ResourceType.TOPIC else "dynamic configs")
    print(f"Configs of {_title(resource)} ({scope}):")
    if not entries:
        print("  (none)")
    for entry in sorted(entries, key=lambda e: e.name):
        for line in format_entry(entry, args.synonyms):
            print(line)
    return 0


def run_alter(args: argparse.Namespace) -> int:
    if _quota_entity(args):
        with SyncAdminClient(**admin_options(args)) as admin:
            configs_quotas.alter(admin, args)
        return 0
    if args.add_config or args.delete_config:
        raise UsageError("--add-config / --delete-config are for --entity-type users, clients "
                         "and ips; topics and brokers take --set / --delete")
    resource = _resource(args)
    sets = parse_key_values(args.set, "--set")
    deletes = [k.strip() for k in args.delete]
    if not sets and not deletes:
        raise UsageError("nothing to alter: give --set KEY=VALUE and/or --delete KEY")
    overlap = set(sets) & set(deletes)
    if overlap:
        raise UsageError(f"both set and deleted: {', '.join(sorted(overlap))}")
    ops = [AlterConfigOp(k, AlterConfigOpType.SET, v) for k, v in sets.items()]
    ops += [AlterConfigOp(k, AlterConfigOpType.DELETE) for k in deletes]
    with SyncAdminClient(**admin_options(args)) as admin:
        if resource.type == ResourceType.TOPIC:
            admin.describe_topics([resource.name])
        admin.incremental_alter_configs(resource, ops, validate_only=args.validate_only)
    keys = TOPIC_KEYS if resource.type == ResourceType.TOPIC else BROKER_KEYS
    warn_ignored_configs(keys, sets)
    verb = "Validated" if args.validate_only else "Updated"
    print(f"{verb} config of {_title(resource)}.")
    return 0
