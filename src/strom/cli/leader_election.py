"""``strom leader-election`` (kafka-leader-election.sh): preferred or unclean leader election.

    strom leader-election --election-type preferred --all-topic-partitions
    strom leader-election --election-type unclean --topic t --partition 0
    strom leader-election --election-type preferred --path-to-json-file elect.json

The JSON file is Kafka's: ``{"partitions": [{"topic": "t", "partition": 1}, …]}`` (no
duplicates). Output as Kafka's tool (partitions as ``topic-partition``, comma-separated)::

    Successfully completed leader election (PREFERRED) for partitions t-0, t-1
    Valid replica already elected for partitions t-2
    Error completing leader election (PREFERRED) for partition: t-3: <error>

and when some partition failed, ``N replica(s) could not be elected`` on stderr, exit 1.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from strom.cli.client_props import add_client_config, admin_options
from strom.cli.common import UsageError, non_negative
from strom.cli.reassign_json import duplicates, json_array, json_field
from strom.client.partition_admin import ElectionType
from strom.client.sync import SyncAdminClient
from strom.common.errors import KafkaError, StromError, error_class
from strom.common.types import TopicPartition

ElectionNotNeededError = error_class("ELECTION_NOT_NEEDED")


class AdminCommandFailedError(StromError):
    """Some partitions failed (after the others were reported)."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("leader-election", help="elect preferred or unclean partition leaders "
                                               "(kafka-leader-election)",
                       description="Run a preferred or unclean leader election.")
    p.add_argument("--election-type", required=True, type=str.lower,
                   choices=("preferred", "unclean"),
                   help="preferred: move leadership back to the first replica; unclean: "
                        "elect any live replica where no in-sync replica is left")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--topic", help="the topic of the partition to elect (with --partition)")
    what.add_argument("--all-topic-partitions", action="store_true",
                      help="every eligible partition")
    what.add_argument("--path-to-json-file", metavar="FILE",
                      help='partitions as {"partitions": [{"topic": "t", "partition": 0}]}')
    p.add_argument("--partition", type=non_negative, help="with --topic: the partition id")
    add_client_config(p, "admin")
    p.set_defaults(run=run)


def partitions_from_json(text: str, source: str) -> list[TopicPartition]:
    """Kafka's election file: ``{"partitions": [{"topic": …, "partition": …}, …]}``."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{source} is not JSON: {exc}") from None
    if not isinstance(data, dict) or "partitions" not in data:
        raise UsageError('Replica election data is missing "partitions" field')
    out = [TopicPartition(json_field(item, "topic", str), json_field(item, "partition", int))
           for item in json_array(data, "partitions")]
    repeated = duplicates(out)
    if repeated:
        raise UsageError("Replica election data contains duplicate partitions: "
                         + ", ".join(map(str, repeated)))
    return out


def wanted_partitions(args: argparse.Namespace) -> list[TopicPartition] | None:
    if args.topic is not None:
        if args.partition is None:
            raise UsageError("--partition is required with --topic")
        return [TopicPartition(args.topic, args.partition)]
    if args.partition is not None:
        raise UsageError("--partition needs --topic")
    if args.path_to_json_file:
        path = Path(args.path_to_json_file)
        return partitions_from_json(path.read_text("utf-8"), str(path))
    return None


def result_lines(election_type: ElectionType,
                 outcome: dict[TopicPartition, KafkaError | None]) -> tuple[list[str], int]:
    """The output lines and the number of failed partitions."""
    def names(tps: list[TopicPartition]) -> str:
        return ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(tps))

    kind = election_type.name
    done = [tp for tp, error in outcome.items() if error is None]
    noop = [tp for tp, error in outcome.items() if isinstance(error, ElectionNotNeededError)]
    failed = {tp: error for tp, error in sorted(outcome.items())
              if error is not None and not isinstance(error, ElectionNotNeededError)}
    lines = []
    if done:
        lines.append(f"Successfully completed leader election ({kind}) for partitions "
                     f"{names(done)}")
    if noop:
        lines.append(f"Valid replica already elected for partitions {names(noop)}")
    lines += [f"Error completing leader election ({kind}) for partition: "
              f"{tp.topic}-{tp.partition}: {error}" for tp, error in failed.items()]
    return lines, len(failed)


def run(args: argparse.Namespace) -> int:
    election_type = ElectionType[args.election_type.upper()]
    partitions = wanted_partitions(args)
    with SyncAdminClient(**admin_options(args)) as admin:
        outcome = admin.elect_leaders(election_type, partitions)
    lines, failed = result_lines(election_type, outcome)
    for line in lines:
        print(line)
    if failed:
        raise AdminCommandFailedError(f"{failed} replica(s) could not be elected")
    return 0
