"""``strom groups``: list, describe, reset offsets of, and delete consumer groups.

Output follows kafka-consumer-groups.sh: ``describe`` prints one row per partition with the
committed offset, the log end offset and the lag, then the members and their assignments.
``reset-offsets`` is a dry run unless ``--execute`` is given, and refuses to touch a group
that still has members (their commits would overwrite the reset).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence

from strom.cli.client_props import add_client_config, admin_options
from strom.cli.common import UsageError, parse_timestamp
from strom.cli.groups_reset import (
    PartitionBounds,
    ResetKind,
    ResetSpec,
    parse_topic_spec,
    plan_reset,
)
from strom.client.admin_types import (
    GroupDescription,
    GroupState,
    GroupType,
    MemberDescription,
    OffsetSpec,
)
from strom.client.sync import SyncAdminClient
from strom.common.errors import KafkaError, UnknownTopicOrPartitionError, error_class
from strom.common.types import TopicPartition

GroupIdNotFoundError = error_class("GROUP_ID_NOT_FOUND")
NonEmptyGroupError = error_class("NON_EMPTY_GROUP")
_STATES = {s.lower(): s for s in GroupState.ALL}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("groups", help="list, describe, reset offsets of and delete consumer "
                                      "groups",
                       description="Manage consumer groups and their committed offsets.")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    ls = actions.add_parser("list", help="list group ids")
    ls.add_argument("--state", nargs="?", const="", default=None, metavar="STATE[,STATE]",
                    help="show each group's state; with STATE, only groups in those states "
                         f"({', '.join(GroupState.ALL)})")
    ls.add_argument("--type", nargs="?", const="", default=None, metavar="TYPE[,TYPE]",
                    help="show each group's type; with TYPE, only groups of those types "
                         f"({', '.join(GroupType.ALL)}), as kafka-consumer-groups --type")
    add_client_config(ls, "admin")
    ls.set_defaults(run=run_list)

    d = actions.add_parser("describe", help="offsets, lag, members and assignments of a group")
    d.add_argument("group", metavar="GROUP")
    shown = d.add_mutually_exclusive_group()
    shown.add_argument("--offsets", action="store_true", help="only the per-partition table")
    shown.add_argument("--members", action="store_true", help="only the members table")
    add_client_config(d, "admin")
    d.set_defaults(run=run_describe)

    r = actions.add_parser("reset-offsets", help="move a group's committed offsets "
                                                 "(dry run unless --execute)")
    r.add_argument("group", metavar="GROUP")
    which = r.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", action="append", default=None,
                       metavar="TOPIC[:P[,P…]]", help="a topic, optionally only some of its "
                                                      "partitions; repeatable")
    which.add_argument("--all-topics", action="store_true",
                       help="every topic the group has committed offsets for")
    to = r.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the log end offset")
    to.add_argument("--to-offset", type=int, metavar="N",
                    help="offset N (clamped to the partition's earliest / latest offsets)")
    to.add_argument("--to-datetime", metavar="TIME",
                    help="the first offset at or after TIME (ISO-8601, e.g. "
                         "2024-05-01T12:00:00Z, or ms since the epoch)")
    to.add_argument("--shift-by", type=int, metavar="N",
                    help="move the committed offset by N (negative: back)")
    mode = r.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="apply the new offsets")
    mode.add_argument("--dry-run", action="store_true",
                      help="only print the new offsets (the default)")
    add_client_config(r, "admin")
    r.set_defaults(run=run_reset)

    rm = actions.add_parser("delete", help="delete groups and their committed offsets")
    rm.add_argument("groups", nargs="+", metavar="GROUP")
    add_client_config(rm, "admin")
    rm.set_defaults(run=run_delete)

    do = actions.add_parser("delete-offsets",
                            help="delete a group's committed offsets of some topics")
    do.add_argument("group", metavar="GROUP")
    do.add_argument("--topic", action="append", required=True, metavar="TOPIC[:P[,P…]]",
                    help="a topic, optionally only some of its partitions; repeatable")
    add_client_config(do, "admin")
    do.set_defaults(run=run_delete_offsets)


def _admin(args: argparse.Namespace) -> SyncAdminClient:
    return SyncAdminClient(**admin_options(args))


def format_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Left-aligned columns separated by two spaces (``-`` for None), as Kafka's tools do."""
    cells = [list(headers)] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in cells)


# -- list ---------------------------------------------------------------------------------------
def parse_states(text: str) -> list[str]:
    """``"stable,empty"`` → the broker's state names; UsageError for an unknown one."""
    states: list[str] = []
    for item in text.split(","):
        name = item.strip().lower()
        if not name:
            continue
        if name not in _STATES:
            raise UsageError(f"unknown group state {item.strip()!r}: expected one of "
                             f"{', '.join(GroupState.ALL)}")
        states.append(_STATES[name])
    return states


def parse_types(text: str) -> list[str]:
    """``"consumer,classic"`` → group types; UsageError for an unknown one."""
    types = [item.strip().lower() for item in text.split(",") if item.strip()]
    for name in types:
        if name not in GroupType.ALL:
            raise UsageError(f"unknown group type {name!r}: expected one of "
                             f"{', '.join(GroupType.ALL)}")
    return types


def run_list(args: argparse.Namespace) -> int:
    states = parse_states(args.state) if args.state else None
    types = parse_types(args.type) if args.type else None
    with _admin(args) as admin:
        groups = admin.list_groups(states, types=types)
    if args.state is None and args.type is None:
        for g in groups:
            print(g.group_id)
        return 0
    headers = ["GROUP"] + (["TYPE"] if args.type is not None else []) + (
        ["STATE"] if args.state is not None else [])
    print(format_table(headers, (
        [g.group_id] + ([(g.group_type or "classic").capitalize()]
                        if args.type is not None else [])
        + ([g.state] if args.state is not None else []) for g in groups)))
    return 0


# -- describe -----------------------------------------------------------------------------------
def _describe(admin: SyncAdminClient, group_id: str) -> GroupDescription:
    """The group, or GroupIdNotFoundError for one that does not exist (also when an older
    broker reports it as ``Dead``)."""
    group = admin.describe_group(group_id)
    if group.state == GroupState.DEAD and not group.members:
        raise GroupIdNotFoundError(f"group {group_id!r} does not exist")
    return group


def _existing_partitions(admin: SyncAdminClient, topics: Iterable[str]) -> set[TopicPartition]:
    """The partitions of those of ``topics`` that exist."""
    present = set(admin.list_topics(include_internal=True))
    wanted = sorted(set(topics) & present)
    if not wanted:
        return set()
    return {TopicPartition(t.name, p.partition)
            for t in admin.describe_topics(wanted) for p in t.partitions}


def run_describe(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        group = _describe(admin, args.group)
        committed = admin.list_consumer_group_offsets(args.group)
        owners: dict[TopicPartition, MemberDescription] = {
            tp: m for m in group.members for tp in m.partitions}
        partitions = sorted(set(committed) | set(owners))
        existing = _existing_partitions(admin, {tp.topic for tp in partitions})
        ends = admin.list_offsets({tp: OffsetSpec.LATEST for tp in partitions
                                   if tp in existing}) if existing else {}

    node = group.coordinator
    coordinator = f"{node.node_id} ({node.address})" if node else "unknown"
    protocol = group.protocol_type + (f" ({group.protocol})" if group.protocol else "")
    print(f"Group: {group.group_id}  State: {group.state}  Protocol: {protocol or '-'}  "
          f"Coordinator: {coordinator}  Members: {len(group.members)}")
    if not group.members:
        print(f"Consumer group '{group.group_id}' has no active members.", file=sys.stderr)
    if not args.members:
        rows = []
        for tp in partitions:
            offset = committed[tp].offset if tp in committed else None
            end = ends[tp].offset if tp in ends else None
            lag = end - offset if offset is not None and end is not None else None
            owner = owners.get(tp)
            rows.append((group.group_id, tp.topic, tp.partition, offset, end, lag,
                         owner.member_id if owner else None,
                         owner.client_host if owner else None,
                         owner.client_id if owner else None))
        print()
        print(format_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                            "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"], rows))
    if not args.offsets and group.members:
        print()
        print(format_table(
            ["CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"],
            ((m.member_id, m.client_host, m.client_id, len(m.partitions),
              format_assignment(m.partitions) or None) for m in group.members)))
    return 0


def format_assignment(partitions: Iterable[TopicPartition]) -> str:
    """``orders(0,1),pay(2)`` — each topic once with its partitions."""
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ",".join(f"{t}({','.join(map(str, ps))})" for t, ps in by_topic.items())


# -- reset-offsets ------------------------------------------------------------------------------
def _reset_spec(args: argparse.Namespace) -> ResetSpec:
    if args.to_earliest:
        return ResetSpec(ResetKind.EARLIEST)
    if args.to_latest:
        return ResetSpec(ResetKind.LATEST)
    if args.to_offset is not None:
        if args.to_offset < 0:
            raise UsageError(f"--to-offset must be ≥ 0, got {args.to_offset}")
        return ResetSpec(ResetKind.OFFSET, args.to_offset)
    if args.to_datetime is not None:
        return ResetSpec(ResetKind.DATETIME, parse_timestamp(args.to_datetime))
    return ResetSpec(ResetKind.SHIFT, args.shift_by)


def _refuse_if_active(admin: SyncAdminClient, group_id: str, what: str) -> None:
    try:
        group = admin.describe_group(group_id)
    except KafkaError as exc:
        if isinstance(exc, GroupIdNotFoundError):
            return  # a group that does not exist yet may be given offsets
        raise
    if group.is_active:
        raise NonEmptyGroupError(
            f"cannot {what} of group {group_id!r}: it has {len(group.members)} active "
            f"member(s) (state {group.state}); stop its consumers first")


def _resolve_partitions(admin: SyncAdminClient, specs: Sequence[str]) -> list[TopicPartition]:
    """``--topic`` values → partitions; clear errors for unknown topics and partitions."""
    parsed = [parse_topic_spec(s) for s in specs]
    described = {t.name: t for t in admin.describe_topics(sorted({t for t, _ in parsed}))}
    out: list[TopicPartition] = []
    for topic, partitions in parsed:
        have = sorted(p.partition for p in described[topic].partitions)
        for p in have if partitions is None else partitions:
            if p not in have:
                raise UnknownTopicOrPartitionError(
                    f"partition {p} of topic {topic!r} does not exist (it has {len(have)})")
            out.append(TopicPartition(topic, p))
    return list(dict.fromkeys(out))


def run_reset(args: argparse.Namespace) -> int:
    spec = _reset_spec(args)
    with _admin(args) as admin:
        _refuse_if_active(admin, args.group, "reset offsets")
        committed = {tp: o.offset
                     for tp, o in admin.list_consumer_group_offsets(args.group).items()}
        if args.all_topics:
            existing = _existing_partitions(admin, {tp.topic for tp in committed})
            partitions = sorted(tp for tp in committed if tp in existing)
            if not partitions:
                raise UsageError(f"group {args.group!r} has no committed offsets of existing "
                                 "topics; name them with --topic")
        else:
            partitions = _resolve_partitions(admin, args.topic)
        earliest = admin.list_offsets(dict.fromkeys(partitions, OffsetSpec.EARLIEST))
        latest = admin.list_offsets(dict.fromkeys(partitions, OffsetSpec.LATEST))
        by_time = (admin.list_offsets(dict.fromkeys(partitions, spec.value))
                   if spec.kind is ResetKind.DATETIME else {})
        bounds = {tp: PartitionBounds(earliest[tp].offset, latest[tp].offset,
                                      by_time[tp].offset if tp in by_time else None)
                  for tp in partitions}
        plan = plan_reset(spec, partitions, committed, bounds)
        if args.execute:
            admin.alter_consumer_group_offsets(args.group, plan)
    print(format_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
                       ((args.group, tp.topic, tp.partition, committed.get(tp), offset)
                        for tp, offset in plan.items())))
    if args.execute:
        print(f"Reset the offsets of group {args.group} for {len(plan)} partition(s).",
              file=sys.stderr)
    else:
        print("Dry run: nothing was changed; add --execute to apply these offsets.",
              file=sys.stderr)
    return 0


# -- delete -------------------------------------------------------------------------------------
def run_delete(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        for group_id in dict.fromkeys(args.groups):
            admin.delete_consumer_groups([group_id])
            print(f"Deleted consumer group {group_id}.")
    return 0


def run_delete_offsets(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        partitions = _resolve_partitions(admin, args.topic)
        admin.delete_consumer_group_offsets(args.group, partitions)
    print(f"Deleted the committed offsets of group {args.group} for {len(partitions)} "
          "partition(s).")
    return 0
