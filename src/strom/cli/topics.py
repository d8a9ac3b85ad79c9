"""``strom topics``: create, list, describe, alter and delete topics."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator

from strom.cli import topics_describe
from strom.cli.client_props import add_client_config, admin_options
from strom.cli.common import (
    UsageError,
    parse_key_values,
    positive,
    warn_ignored_configs,
)
from strom.client.admin_types import (
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
)
from strom.client.sync import SyncAdminClient
from strom.common.config import TOPIC_KEYS
from strom.common.errors import (
    ClusterAuthorizationFailedError,
    PolicyViolationError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from strom.common.types import TopicPartition


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("topics", help="create, list, describe, alter and delete topics",
                       description="Manage topics.")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    c = actions.add_parser("create", help="create a topic")
    c.add_argument("name", metavar="NAME")
    c.add_argument("--partitions", type=positive, default=None,
                   help="number of partitions (default: the broker's num.partitions)")
    c.add_argument("--replication-factor", type=positive, default=None,
                   help="copies of each partition (default: default.replication.factor)")
    c.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="a topic config override; repeatable")
    c.add_argument("--if-not-exists", action="store_true",
                   help="succeed quietly when the topic already exists")
    c.add_argument("--validate-only", action="store_true",
                   help="check the request without creating the topic")
    add_client_config(c, "admin")
    c.set_defaults(run=run_create)

    ls = actions.add_parser("list", help="list topic names")
    ls.add_argument("--include-internal", action="store_true",
                    help="also list internal topics (__consumer_offsets, …)")
    add_client_config(ls, "admin")
    ls.set_defaults(run=run_list)

    d = actions.add_parser("describe", help="partitions, leaders, replicas, ISR and overrides")
    d.add_argument("names", nargs="*", metavar="NAME", help="topics (default: all)")
    d.add_argument("--include-internal", action="store_true",
                   help="with no NAME, include internal topics")
    topics_describe.add_filters(d)
    add_client_config(d, "admin")
    d.set_defaults(run=run_describe)

    a = actions.add_parser("alter", help="add partitions or change config overrides")
    a.add_argument("name", metavar="NAME")
    a.add_argument("--partitions", type=positive, default=None,
                   help="the new (larger) total number of partitions")
    a.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="set a config override; repeatable")
    a.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                   help="remove a config override; repeatable")
    add_client_config(a, "admin")
    a.set_defaults(run=run_alter)

    rm = actions.add_parser("delete", help="delete topics")
    rm.add_argument("names", nargs="+", metavar="NAME")
    rm.add_argument("--if-exists", action="store_true",
                    help="succeed quietly when a topic does not exist")
    add_client_config(rm, "admin")
    rm.set_defaults(run=run_delete)


def _admin(args: argparse.Namespace) -> SyncAdminClient:
    return SyncAdminClient(**admin_options(args))


#: What the broker's whole-request refusals mean (Kafka's messages, as the broker sends them).
_LIMIT_HINTS = {
    "Excessively large number of partitions per request.":
        "a request may create at most 10,000 partitions: create the topic with fewer and "
        "add the rest with 'strom topics alter --partitions' in steps of at most 10,000",
    "Excessively large number of additional partitions per request.":
        "a request may add at most 10,000 partitions: grow the topic in steps of at most "
        "10,000",
    "Unable to perform excessively large batch operation.":
        "one request may write at most 10,000 metadata records (a topic, each partition and "
        "each config override count one): use fewer partitions or overrides per request",
}


@contextlib.contextmanager
def _explained_limits() -> Iterator[None]:
    """A refusal by the brokers' per-request bounds says what to do instead."""
    try:
        yield
    except PolicyViolationError as exc:
        hint = next((h for m, h in _LIMIT_HINTS.items() if m in str(exc)), None)
        if hint is None:
            raise
        raise PolicyViolationError(f"{exc.message} ({hint})") from None


def run_create(args: argparse.Namespace) -> int:
    configs = parse_key_values(args.config)
    with _admin(args) as admin, _explained_limits():
        try:
            created = admin.create_topic(
                args.name,
                -1 if args.partitions is None else args.partitions,
                -1 if args.replication_factor is None else args.replication_factor,
                configs,
                validate_only=args.validate_only,
            )
        except TopicAlreadyExistsError:
            if args.if_not_exists:
                return 0
            raise
    warn_ignored_configs(TOPIC_KEYS, configs)
    verb = "Validated" if args.validate_only else "Created"
    details = ""
    if created.num_partitions >= 0:
        details = (f" with {created.num_partitions} partition(s), replication factor "
                   f"{created.replication_factor}")
    print(f"{verb} topic {args.name}{details}.")
    return 0


def run_list(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        names = admin.list_topics(include_internal=args.include_internal)
    for name in names:
        print(name)
    return 0


def run_describe(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        if args.names:
            topics = admin.describe_topics(args.names)
        else:
            topics = [t for t in admin.describe_topics(None)
                      if args.include_internal or not t.is_internal]
        entries = admin.describe_configs([ConfigResource.topic(t.name) for t in topics])
        filters = topics_describe.Filters.from_args(args)
        live = {b.node_id for b in admin.describe_cluster().brokers} \
            if filters.unavailable else set()
        partitions = [TopicPartition(t.name, p.partition) for t in topics for p in t.partitions]
        try:  # as kafka-topics.sh: without the API (or the right), no reassignment columns
            reassignments = admin.list_partition_reassignments(partitions) if partitions else {}
        except (UnsupportedVersionError, ClusterAuthorizationFailedError):
            reassignments = {}
    configs = {t.name: entries.get(ConfigResource.topic(t.name), []) for t in topics}
    for line in topics_describe.describe_lines(
            topics, configs, filters, live=live,
            reassignments=reassignments):
        print(line)
    return 0


def run_alter(args: argparse.Namespace) -> int:
    sets = parse_key_values(args.config)
    deletes = [k.strip() for k in args.delete_config]
    if args.partitions is None and not sets and not deletes:
        raise UsageError("nothing to alter: give --partitions, --config or --delete-config")
    overlap = set(sets) & set(deletes)
    if overlap:
        raise UsageError(f"both set and deleted: {', '.join(sorted(overlap))}")
    with _admin(args) as admin:
        if args.partitions is not None:
            with _explained_limits():
                admin.create_partitions({args.name: args.partitions})
            print(f"Topic {args.name} now has {args.partitions} partitions.")
        if sets or deletes:
            ops = [AlterConfigOp(k, AlterConfigOpType.SET, v) for k, v in sets.items()]
            ops += [AlterConfigOp(k, AlterConfigOpType.DELETE) for k in deletes]
            admin.describe_topics([args.name])  # a clear error for a missing topic
            admin.incremental_alter_configs(ConfigResource.topic(args.name), ops)
            print(f"Updated config of topic {args.name}.")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        for name in args.names:
            try:
                admin.delete_topics([name])
            except UnknownTopicOrPartitionError:
                if args.if_exists:
                    continue
                raise
            print(f"Deleted topic {name}.", file=sys.stdout)
    return 0
