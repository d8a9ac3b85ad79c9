"""``strom reassign`` (kafka-reassign-partitions.sh): move partitions between brokers.

    strom reassign --generate --topics-to-move-json-file topics.json --broker-list 0,1,2
    strom reassign --execute --reassignment-json-file plan.json [--throttle BYTES_PER_S]
    strom reassign --verify --reassignment-json-file plan.json
    strom reassign --cancel --reassignment-json-file plan.json
    strom reassign --list

JSON formats: :mod:`strom.cli.reassign_json`. Output lines are Kafka's (``Current partition
replica assignment``, ``Proposed partition reassignment configuration``, ``Successfully
started partition reassignments for t-0,t-1``, ``Reassignment of partition t-0 is
completed.`` …). ``--generate`` places replicas by Kafka's rules
(:func:`strom.controller.placement.assign_replicas`, rack-aware unless
``--disable-rack-aware``). ``--throttle`` sets Kafka's throttle configs (the brokers'
``leader/follower.replication.throttled.rate``, the topics'
``leader/follower.replication.throttled.replicas``); ``--verify`` (once nothing moves) and
``--cancel`` clear them unless ``--preserve-throttles``.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path

from strom.cli import reassign_json as rj
from strom.cli.client_props import add_client_config, admin_options
from strom.cli.common import UsageError
from strom.client.admin_types import AlterConfigOp, AlterConfigOpType, ConfigResource
from strom.client.partition_admin import PartitionReassignment
from strom.client.sync import SyncAdminClient
from strom.common.errors import InvalidConfigError, KafkaError, StromError
from strom.common.types import TopicPartition
from strom.controller.placement import assign_replicas
from strom.metadata.image import BrokerInfo

CANNOT_EXECUTE = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to "
    "override this and create a new partition assignment in addition to the existing one. The "
    "--additional flag can also be used to change the throttle by resubmitting the current "
    "reassignment.")
VERIFY_WARNING = ("Warning: You must run --verify periodically, until the reassignment "
                  "completes, to ensure the throttle is removed.")
BROKER_THROTTLES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
TOPIC_THROTTLES = ("leader.replication.throttled.replicas",
                   "follower.replication.throttled.replicas")


class ReassignmentFailedError(StromError):
    """The brokers refused some partitions' reassignment (each listed in the message)."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("reassign", help="move partitions between brokers "
                                        "(kafka-reassign-partitions)",
                       description="Generate, execute, verify, cancel or list partition "
                                   "reassignments.")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--generate", action="store_true",
                        help="propose an assignment of --topics-to-move-json-file's topics "
                             "over --broker-list")
    action.add_argument("--execute", action="store_true",
                        help="start the reassignment in --reassignment-json-file")
    action.add_argument("--verify", action="store_true",
                        help="report whether --reassignment-json-file's moves completed "
                             "(and then clear throttles)")
    action.add_argument("--cancel", action="store_true",
                        help="cancel the ongoing moves of --reassignment-json-file")
    action.add_argument("--list", action="store_true", help="list ongoing reassignments")
    p.add_argument("--topics-to-move-json-file", metavar="FILE",
                   help='--generate: {"topics": [{"topic": "foo"}], "version": 1}')
    p.add_argument("--broker-list", metavar="IDS", help='--generate: brokers, e.g. "0,1,2"')
    p.add_argument("--disable-rack-aware", action="store_true",
                   help="--generate: ignore the brokers' racks")
    p.add_argument("--reassignment-json-file", metavar="FILE",
                   help="--execute / --verify / --cancel: the reassignment (Kafka's JSON)")
    p.add_argument("--throttle", type=int, default=-1, metavar="BYTES_PER_S",
                   help="--execute: limit replication of the moving partitions (B/s)")
    p.add_argument("--additional", action="store_true",
                   help="--execute: even while other reassignments are in progress")
    p.add_argument("--preserve-throttles", action="store_true",
                   help="--verify / --cancel: leave the throttles in place")
    add_client_config(p, "admin")
    p.set_defaults(run=run)


def _read(path: str | None, option: str) -> str:
    if not path:
        raise UsageError(f"{option} is required for this action")
    return Path(path).read_text("utf-8")


def run(args: argparse.Namespace) -> int:
    with SyncAdminClient(**admin_options(args)) as admin:
        if args.generate:
            topics = rj.parse_topics_to_move(_read(args.topics_to_move_json_file,
                                                   "--topics-to-move-json-file"))
            if not args.broker_list:
                raise UsageError("--broker-list is required with --generate")
            lines = generate(admin, topics, rj.parse_broker_list(args.broker_list),
                             rack_aware=not args.disable_rack_aware)
        elif args.list:
            lines = list_lines(admin.list_partition_reassignments())
        else:
            plan = rj.parse_reassignment(
                _read(args.reassignment_json_file, "--reassignment-json-file"),
                for_execute=args.execute)
            if args.execute:
                lines = execute(admin, plan, args.throttle, additional=args.additional)
            elif args.verify:
                lines = verify(admin, plan, preserve_throttles=args.preserve_throttles)
            else:
                lines = cancel(admin, plan, preserve_throttles=args.preserve_throttles)
    for line in lines:
        print(line)
    return 0


# -- --generate ------------------------------------------------------------------------------
def current_assignment(admin: SyncAdminClient, topics: Sequence[str]
                       ) -> dict[TopicPartition, list[int]]:
    return {TopicPartition(t.name, p.partition): list(p.replicas)
            for t in admin.describe_topics(sorted(set(topics))) for p in t.partitions}


def propose(current: Mapping[TopicPartition, Sequence[int]], brokers: Sequence[BrokerInfo]
            ) -> dict[TopicPartition, list[int]]:
    """Each topic's partitions placed afresh over ``brokers``, keeping its replication
    factor (Kafka's ``calculateAssignment``)."""
    proposed: dict[TopicPartition, list[int]] = {}
    for topic in sorted({tp.topic for tp in current}):
        partitions = sorted(tp for tp in current if tp.topic == topic)
        factor = len(current[partitions[0]])
        placed = assign_replicas(brokers, len(partitions), factor)
        proposed.update({TopicPartition(topic, p): list(r) for p, r in placed.items()})
    return proposed


def generate(admin: SyncAdminClient, topics: Sequence[str], broker_ids: Sequence[int], *,
             rack_aware: bool) -> list[str]:
    current = current_assignment(admin, topics)
    wanted = set(broker_ids)
    brokers = [BrokerInfo(b.node_id, b.host, b.port, b.rack if rack_aware else None)
               for b in admin.describe_cluster().brokers if b.node_id in wanted]
    rackless = sum(1 for b in brokers if b.rack is None)
    if rack_aware and 0 < rackless < len(brokers):
        raise UsageError("Not all brokers have rack information. Add --disable-rack-aware in "
                         "command line to make replica assignment without rack information.")
    proposed = propose(current, brokers)
    return ["Current partition replica assignment", rj.format_reassignment(current), "",
            "Proposed partition reassignment configuration", rj.format_reassignment(proposed)]


# -- --execute -------------------------------------------------------------------------------
def execute(admin: SyncAdminClient, plan: dict[TopicPartition, list[int]], throttle: int, *,
            additional: bool) -> list[str]:
    ongoing = admin.list_partition_reassignments()
    if ongoing and not additional:
        raise UsageError(CANNOT_EXECUTE)
    known = {b.node_id for b in admin.describe_cluster().brokers}
    unknown = sorted({r for replicas in plan.values() for r in replicas} - known)
    if unknown:
        raise UsageError(f"Unknown broker id {unknown[0]}")
    current = current_assignment(admin, [tp.topic for tp in plan])
    missing = sorted(set(plan) - set(current))
    if missing:
        raise UsageError("Unable to find partition: " + ", ".join(map(str, missing)))
    lines = ["Current partition replica assignment", "",
             rj.format_reassignment({tp: current[tp] for tp in plan}), "",
             "Save this to use as the --reassignment-json-file option during rollback"]
    if throttle >= 0:
        lines.append(VERIFY_WARNING)
        set_throttles(admin, moves(ongoing, plan, current), throttle)
        lines.append(f"The inter-broker throttle limit was set to {throttle} B/s")
    _raise_failures("Error reassigning partition(s):",
                    admin.alter_partition_reassignments(plan))
    lines.append(f"Successfully started partition reassignment{_s(plan)} for "
                 + ",".join(map(str, sorted(plan))))
    return lines


def moves(ongoing: Mapping[TopicPartition, PartitionReassignment],
          plan: Mapping[TopicPartition, Sequence[int]],
          current: Mapping[TopicPartition, Sequence[int]]
          ) -> dict[TopicPartition, tuple[set[int], set[int]]]:
    """(sources, destinations) per moving partition: the ongoing moves, then the plan's
    (sources: the current replicas, or an ongoing move's sources; destinations: the new
    replicas that are not sources)."""
    out = {tp: (set(r.replicas) - set(r.adding_replicas), set(r.adding_replicas))
           for tp, r in ongoing.items()}
    for tp, replicas in plan.items():
        sources = out[tp][0] if tp in out else set(current[tp])
        out[tp] = (sources, set(replicas) - sources)
    return out


def throttle_configs(moving: Mapping[TopicPartition, tuple[set[int], set[int]]]
                     ) -> dict[str, tuple[str, str]]:
    """Per topic, Kafka's (leader, follower) ``partition:broker`` throttled-replica lists."""
    out: dict[str, tuple[str, str]] = {}
    for topic in sorted({tp.topic for tp in moving}):
        parts = {tp.partition: m for tp, m in moving.items() if tp.topic == topic}
        leaders = sorted({f"{p}:{b}" for p, (src, _d) in parts.items() for b in src})
        followers = sorted({f"{p}:{b}" for p, (src, dst) in parts.items() for b in dst
                            if b not in src})
        out[topic] = (",".join(leaders), ",".join(followers))
    return out


def set_throttles(admin: SyncAdminClient,
                  moving: Mapping[TopicPartition, tuple[set[int], set[int]]], rate: int
                  ) -> None:
    for topic, (leaders, followers) in throttle_configs(moving).items():
        admin.incremental_alter_configs(ConfigResource.topic(topic), [
            AlterConfigOp(TOPIC_THROTTLES[0], AlterConfigOpType.SET, leaders),
            AlterConfigOp(TOPIC_THROTTLES[1], AlterConfigOpType.SET, followers)])
    brokers = sorted({b for src, dst in moving.values() for b in src | dst})
    for broker in brokers:
        admin.incremental_alter_configs(ConfigResource.broker(broker), [
            AlterConfigOp(name, AlterConfigOpType.SET, str(rate)) for name in BROKER_THROTTLES])


def clear_throttles(admin: SyncAdminClient, topics: Sequence[str]) -> list[str]:
    """Remove every throttle config (each broker's, each topic's), as Kafka's tool does. A
    broker that refuses the names as unknown configs has no throttle to clear."""
    brokers = sorted(b.node_id for b in admin.describe_cluster().brokers)
    topics = sorted(set(topics))
    for resource, names in [*((ConfigResource.broker(b), BROKER_THROTTLES) for b in brokers),
                            *((ConfigResource.topic(t), TOPIC_THROTTLES) for t in topics)]:
        with contextlib.suppress(InvalidConfigError):
            admin.incremental_alter_configs(
                resource, [AlterConfigOp(n, AlterConfigOpType.DELETE) for n in names])
    return [f"Clearing broker-level throttles on broker{_s(brokers)} "
            + ",".join(map(str, brokers)),
            f"Clearing topic-level throttles on topic{_s(topics)} " + ",".join(topics)]


# -- --verify / --cancel / --list ------------------------------------------------------------
def verify(admin: SyncAdminClient, plan: dict[TopicPartition, list[int]], *,
           preserve_throttles: bool) -> list[str]:
    ongoing = admin.list_partition_reassignments()
    current = current_assignment(admin, [tp.topic for tp in plan if tp not in ongoing])
    lines = ["Status of partition reassignment:"]
    for tp, target in sorted(plan.items()):
        if tp in ongoing:
            lines.append(f"Reassignment of partition {tp} is still in progress.")
        elif current.get(tp, []) == target:
            lines.append(f"Reassignment of partition {tp} is completed.")
        else:
            lines.append(f"There is no active reassignment of partition {tp}, but replica set "
                         f"is {_ids(current.get(tp, []))} rather than {_ids(target)}.")
    if not ongoing and not preserve_throttles:
        lines += clear_throttles(admin, [tp.topic for tp in plan])
    return lines


def cancel(admin: SyncAdminClient, plan: dict[TopicPartition, list[int]], *,
           preserve_throttles: bool) -> list[str]:
    ongoing = admin.list_partition_reassignments(list(plan))
    active = sorted(tp for tp, r in ongoing.items()
                    if not r.adding_replicas or r.removing_replicas)
    if active:
        _raise_failures(f"Error cancelling partition reassignment{_s(active)} for:",
                        admin.alter_partition_reassignments({tp: None for tp in active}))
        lines = [f"Successfully cancelled partition reassignment{_s(active)} for: "
                 + ",".join(map(str, active))]
    else:
        lines = ["None of the specified partition reassignments are active."]
    if not preserve_throttles:
        lines += clear_throttles(admin, [tp.topic for tp in plan])
    return lines


def list_lines(ongoing: Mapping[TopicPartition, PartitionReassignment]) -> list[str]:
    if not ongoing:
        return ["No partition reassignments found."]
    lines = ["Current partition reassignments:"]
    for tp, r in sorted(ongoing.items()):
        line = f"{tp}: replicas: {_ids(r.replicas)}."
        if r.adding_replicas:
            line += f" adding: {_ids(r.adding_replicas)}."
        if r.removing_replicas:
            line += f" removing: {_ids(r.removing_replicas)}."
        lines.append(line)
    return lines


def _raise_failures(head: str, outcome: Mapping[TopicPartition, KafkaError | None]) -> None:
    failed = [f"{tp}: {error}" for tp, error in sorted(outcome.items()) if error is not None]
    if failed:
        raise ReassignmentFailedError("\n".join([head, *failed]))


def _ids(ids: Sequence[int]) -> str:
    return ",".join(map(str, ids))


def _s(items: Sequence[object] | Mapping[TopicPartition, object]) -> str:
    return "" if len(items) == 1 else "s"
