"""``strom transactions`` (kafka-transactions.sh) and ``strom producers describe``: inspect
transactional state and recover from hanging transactions (KIP-664).

- ``list``: every transactional id with its coordinator, producer id and state.
- ``describe --transactional-id X``: its coordinator, producer id and epoch, state, timeout,
  start time, running time and partitions.
- ``describe-producers --topic T --partition P [--broker-id B]`` (also ``strom producers
  describe``): the partition's active producers, from its leader or from broker B.
- ``abort --topic T --partition P (--start-offset O | --producer-id ID --producer-epoch E
  --coordinator-epoch C)``: write an ABORT marker for that producer to the partition; with
  ``--start-offset`` the producer is the one whose open transaction starts there.
- ``find-hanging (--topic T [--partition P] | --broker-id B) [--max-transaction-timeout M]``:
  open transactions older than M minutes (default 15) whose coordinator does not know them —
  the producer id maps to no transactional id, the id is not found, or its current
  transaction does not include the partition.

Output is Kafka's: a header row, then one row per item; every cell is padded to its column's
width and followed by a tab. Failures print Kafka's wording on stderr (exit status 1).
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence

from strom.cli.client_props import add_client_config, admin_options
from strom.client.admin_types import (
    AbortTransactionSpec,
    ProducerState,
    TransactionDescription,
)
from strom.client.sync import SyncAdminClient
from strom.common.errors import KafkaError, StromError, error_class
from strom.common.types import TopicPartition

TransactionalIdNotFoundError = error_class("TRANSACTIONAL_ID_NOT_FOUND")

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                    "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                    "TransactionDurationMs", "TopicPartitions")
PRODUCER_HEADERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                    "LastTimestamp", "CurrentTransactionStartOffset")
HANGING_HEADERS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                   "StartOffset", "LastTimestamp", "Duration(min)")


class CommandError(StromError):
    """A failure worded as kafka-transactions.sh words it."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(f"{message}: {cause}." if cause is not None else message)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("transactions", help="list, describe and abort transactions "
                                            "(kafka-transactions)",
                       description="Analyze the transactional state of producers in the "
                                   "cluster; detect and recover from hanging transactions.")
    actions = p.add_subparsers(dest="action", metavar="COMMAND")
    actions.required = True

    ls = actions.add_parser("list", help="list transactions")
    add_client_config(ls, "admin")
    ls.set_defaults(run=run_list)

    d = actions.add_parser("describe", help="describe the state of an active transactional-id")
    d.add_argument("--transactional-id", required=True, metavar="ID", help="transactional id")
    add_client_config(d, "admin")
    d.set_defaults(run=run_describe)

    _add_describe_producers(actions, "describe-producers")

    a = actions.add_parser("abort", help="abort a hanging transaction (requires "
                                         "administrative privileges)")
    a.add_argument("--topic", required=True, help="topic name")
    a.add_argument("--partition", required=True, type=int, help="partition number")
    a.add_argument("--start-offset", type=int, metavar="OFFSET",
                   help="start offset of the transaction to abort")
    a.add_argument("--producer-id", type=int, metavar="ID", help="producer id")
    a.add_argument("--producer-epoch", type=int, metavar="EPOCH", help="producer epoch")
    a.add_argument("--coordinator-epoch", type=int, metavar="EPOCH", help="coordinator epoch")
    add_client_config(a, "admin")
    a.set_defaults(run=run_abort)

    f = actions.add_parser("find-hanging", help="find hanging transactions")
    f.add_argument("--broker-id", type=int, metavar="ID",
                   help="broker id to search for hanging transactions")
    f.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                   help="maximum transaction timeout in minutes to limit the scope of the "
                        "search (default 15)")
    f.add_argument("--topic", help="topic name to limit search to")
    f.add_argument("--partition", type=int, help="partition number")
    add_client_config(f, "admin")
    f.set_defaults(run=run_find_hanging)


def register_producers(sub: argparse._SubParsersAction) -> None:
    """``strom producers describe``: the same as ``strom transactions describe-producers``."""
    p = sub.add_parser("producers", help="describe a partition's active producers")
    actions = p.add_subparsers(dest="action", metavar="COMMAND")
    actions.required = True
    _add_describe_producers(actions, "describe")


def _add_describe_producers(actions: argparse._SubParsersAction, name: str) -> None:
    dp = actions.add_parser(name, help="describe the states of active producers for a topic "
                                       "partition")
    dp.add_argument("--broker-id", type=int, metavar="ID",
                    help="describe the producer state on this replica (default: the leader)")
    dp.add_argument("--topic", required=True, help="topic name")
    dp.add_argument("--partition", required=True, type=int, help="partition number")
    add_client_config(dp, "admin")
    dp.set_defaults(run=run_describe_producers)


def format_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Kafka's tool layout: each cell padded to its column's width, then a tab."""
    cells = [list(headers)] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("".join(c.ljust(w) + "\t" for c, w in zip(row, widths, strict=True))
                     for row in cells)


def _admin(args: argparse.Namespace) -> SyncAdminClient:
    return SyncAdminClient(**admin_options(args))


def _tp(args: argparse.Namespace) -> TopicPartition:
    return TopicPartition(args.topic, args.partition)


def _opt(value: int | None) -> str:
    return "None" if value is None else str(value)


# -- list / describe ----------------------------------------------------------------------------
def run_list(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        try:
            listings = admin.list_transactions()
        except KafkaError as exc:
            raise CommandError("Failed to list transactions", exc) from None
    print(format_table(LIST_HEADERS, ((t.transactional_id, t.coordinator_id, t.producer_id,
                                       t.state) for t in listings)))
    return 0


def describe_row(d: TransactionDescription, now_ms: int) -> list[object]:
    start = d.transaction_start_time_ms
    return [d.coordinator_id, d.transactional_id, d.producer_id, d.producer_epoch, d.state,
            d.transaction_timeout_ms, _opt(start), "None" if start is None else now_ms - start,
            ",".join(str(tp) for tp in sorted(d.topic_partitions))]


def run_describe(args: argparse.Namespace) -> int:
    tid = args.transactional_id
    with _admin(args) as admin:
        try:
            description = admin.describe_transactions([tid])[tid]
        except KafkaError as exc:
            raise CommandError(f"Failed to describe transaction state of transactional-id "
                               f"`{tid}`", exc) from None
    print(format_table(DESCRIBE_HEADERS, [describe_row(description, int(time.time() * 1000))]))
    return 0


# -- producers ----------------------------------------------------------------------------------
def producer_row(p: ProducerState) -> list[object]:
    return [p.producer_id, p.producer_epoch,
            -1 if p.coordinator_epoch is None else p.coordinator_epoch, p.last_sequence,
            p.last_timestamp, _opt(p.current_transaction_start_offset)]


def run_describe_producers(args: argparse.Namespace) -> int:
    tp = _tp(args)
    with _admin(args) as admin:
        try:
            producers = admin.describe_producers([tp], broker_id=args.broker_id)[tp]
        except KafkaError as exc:
            where = "leader" if args.broker_id is None else f"broker {args.broker_id}"
            raise CommandError(f"Failed to describe producers for partition {tp} on {where}",
                               exc) from None
    assert not isinstance(producers, KafkaError)
    print(format_table(PRODUCER_HEADERS, map(producer_row, producers)))
    return 0


# -- abort --------------------------------------------------------------------------------------
def _spec_at(admin: SyncAdminClient, tp: TopicPartition, start_offset: int
             ) -> AbortTransactionSpec:
    try:
        producers = admin.describe_producers([tp])[tp]
    except KafkaError as exc:
        raise CommandError(f"Failed to validate producer state for partition {tp}",
                           exc) from None
    assert not isinstance(producers, KafkaError)
    for p in producers:
        if p.current_transaction_start_offset == start_offset:
            return AbortTransactionSpec(tp, p.producer_id, p.producer_epoch,
                                        p.coordinator_epoch or 0)
    raise CommandError(f"Could not find any open transactions starting at offset "
                       f"{start_offset} on partition {tp}")


def run_abort(args: argparse.Namespace) -> int:
    tp = _tp(args)
    if args.start_offset is None and args.producer_id is None:
        raise CommandError("The transaction to abort must be identified either with "
                           "--start-offset (for brokers on 3.0 or above) or with --producer-id, "
                           "--producer-epoch, and --coordinator-epoch (for older brokers)")
    with _admin(args) as admin:
        if args.start_offset is not None:
            spec = _spec_at(admin, tp, args.start_offset)
        else:
            if args.producer_epoch is None:
                raise CommandError("Missing required argument --producer-epoch")
            if args.coordinator_epoch is None:
                raise CommandError("Missing required argument --coordinator-epoch")
            # -1 (no marker seen yet): 0 is at most any coordinator epoch, as Kafka's tool.
            spec = AbortTransactionSpec(tp, args.producer_id, args.producer_epoch,
                                        max(args.coordinator_epoch, 0))
        try:
            admin.abort_transaction(spec)
        except KafkaError as exc:
            raise CommandError(f"Failed to abort transaction {spec}", exc) from None
    return 0


# -- find-hanging -------------------------------------------------------------------------------
def _partitions_to_search(admin: SyncAdminClient, args: argparse.Namespace
                          ) -> list[TopicPartition]:
    if args.topic is not None and args.partition is not None:
        return [_tp(args)]
    topics = [args.topic] if args.topic is not None else admin.list_topics()
    try:
        described = admin.describe_topics(topics)
    except KafkaError as exc:
        raise CommandError(f"Failed to describe {len(topics)} topics", exc) from None
    return [TopicPartition(t.name, p.partition) for t in described for p in t.partitions
            if args.broker_id is None or args.broker_id in p.replicas]


def find_hanging(admin: SyncAdminClient, partitions: list[TopicPartition],
                 broker_id: int | None, max_timeout_ms: int, now_ms: int
                 ) -> list[tuple[TopicPartition, ProducerState]]:
    """Open transactions older than ``max_timeout_ms`` that their coordinator does not
    know (see the module doc), in partition order."""
    try:
        by_partition = admin.describe_producers(partitions, broker_id=broker_id)
    except KafkaError as exc:
        raise CommandError(f"Failed to describe producers for {len(partitions)} partitions "
                           f"on broker {broker_id}", exc) from None
    candidates: dict[int, list[tuple[TopicPartition, ProducerState]]] = defaultdict(list)
    for tp, producers in by_partition.items():
        assert not isinstance(producers, KafkaError)
        for p in producers:
            if p.current_transaction_start_offset is not None and \
                    now_ms - p.last_timestamp > max_timeout_ms:
                candidates[p.producer_id].append((tp, p))
    if not candidates:
        return []
    try:
        ids = {t.producer_id: t.transactional_id
               for t in admin.list_transactions(producer_ids=candidates)
               if t.producer_id in candidates}
    except KafkaError as exc:
        raise CommandError(f"Failed to list transactions for {len(candidates)} producers",
                           exc) from None
    descriptions: dict[str, TransactionDescription | None] = {}
    for tid in sorted(set(ids.values())):
        try:
            descriptions[tid] = admin.describe_transactions([tid])[tid]
        except TransactionalIdNotFoundError:
            descriptions[tid] = None
        except KafkaError as exc:
            raise CommandError(f"Failed to describe {len(ids)} transactions", exc) from None
    hanging: list[tuple[TopicPartition, ProducerState]] = []
    for pid, opened in candidates.items():
        description = descriptions.get(ids[pid]) if pid in ids else None
        hanging += [(tp, p) for tp, p in opened
                    if description is None or tp not in description.topic_partitions]
    return sorted(hanging, key=lambda item: (item[0], item[1].producer_id))


def run_find_hanging(args: argparse.Namespace) -> int:
    if args.topic is None and args.broker_id is None:
        raise CommandError("The `find-hanging` command requires either --topic or --broker-id "
                           "to limit the scope of the search")
    if args.partition is not None and args.topic is None:
        raise CommandError("The --partition argument requires --topic to be provided")
    now_ms = int(time.time() * 1000)
    with _admin(args) as admin:
        hanging = find_hanging(admin, _partitions_to_search(admin, args), args.broker_id,
                               args.max_transaction_timeout * 60_000, now_ms)
    print(format_table(HANGING_HEADERS, (
        (tp.topic, tp.partition, p.producer_id, p.producer_epoch,
         -1 if p.coordinator_epoch is None else p.coordinator_epoch,
         _opt(p.current_transaction_start_offset), p.last_timestamp,
         (now_ms - p.last_timestamp) // 60_000) for tp, p in hanging)))
    return 0
