"""``strom configs``: describe and alter topic and broker configuration."""

from __future__ import annotations

import argparse

from strom.cli.common import UsageError, add_bootstrap, parse_key_values
from strom.client.admin_types import (
    AlterConfigOp,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from strom.client.sync import SyncAdminClient
from strom.common.config import ConfigSource

# Which sources count as "set here" when --all is not given (as kafka-configs shows them).
_OVERRIDE_SOURCES = {
    ResourceType.TOPIC: {ConfigSource.DYNAMIC_TOPIC_CONFIG},
    ResourceType.BROKER: {ConfigSource.DYNAMIC_BROKER_CONFIG,
                          ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
                          ConfigSource.STATIC_BROKER_CONFIG},
}


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
    add_bootstrap(d)
    d.set_defaults(run=run_describe)

    a = actions.add_parser("alter", help="set or delete config overrides")
    _add_entity(a)
    a.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="set an override; repeatable")
    a.add_argument("--delete", action="append", default=[], metavar="KEY",
                   help="remove an override (back to the default); repeatable")
    a.add_argument("--validate-only", action="store_true", help="check without applying")
    add_bootstrap(a)
    a.set_defaults(run=run_alter)


def _add_entity(parser: argparse.ArgumentParser) -> None:
    entity = parser.add_mutually_exclusive_group(required=True)
    entity.add_argument("--topic", metavar="NAME", help="a topic")
    entity.add_argument("--broker", metavar="ID", help="a broker id")


def _resource(args: argparse.Namespace) -> ConfigResource:
    if args.topic is not None:
        return ConfigResource.topic(args.topic)
    if not str(args.broker).isdigit():
        raise UsageError(f"--broker expects a numeric broker id, got {args.broker!r}")
    return ConfigResource.broker(args.broker)


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


def run_describe(args: argparse.Namespace) -> int:
    resource = _resource(args)
    with SyncAdminClient(args.bootstrap_server,
                         request_timeout_s=args.request_timeout_ms / 1000) as admin:
        if resource.type == ResourceType.TOPIC:
            admin.describe_topics([resource.name])  # a clear error for a missing topic
        result = admin.describe_configs([resource], include_synonyms=args.synonyms)
    entries = result.get(resource, [])
    if not args.all:
        keep = _OVERRIDE_SOURCES.get(resource.type, set())
        entries = [e for e in entries if e.source in keep]
    kind = "topic" if resource.type == ResourceType.TOPIC else "broker"
    scope = "all configs" if args.all else "overrides"
    print(f"Configs of {kind} {resource.name} ({scope}):")
    if not entries:
        print("  (none)")
    for entry in sorted(entries, key=lambda e: e.name):
        for line in format_entry(entry, args.synonyms):
            print(line)
    return 0


def run_alter(args: argparse.Namespace) -> int:
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
    with SyncAdminClient(args.bootstrap_server,
                         request_timeout_s=args.request_timeout_ms / 1000) as admin:
        if resource.type == ResourceType.TOPIC:
            admin.describe_topics([resource.name])
        admin.incremental_alter_configs(resource, ops, validate_only=args.validate_only)
    kind = "topic" if resource.type == ResourceType.TOPIC else "broker"
    verb = "Validated" if args.validate_only else "Updated"
    print(f"{verb} config of {kind} {resource.name}.")
    return 0
