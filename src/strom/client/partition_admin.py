"""Partition administration as Kafka's ``Admin.electLeaders``,
``Admin.alterPartitionReassignments`` and ``Admin.listPartitionReassignments``: the requests
sent to the controller, and their answers as plain data.

Wire (Kafka's JSON schemas):

* ElectLeaders (43) v0-2: ``election_type`` int8 (v1+; 0 preferred, 1 unclean — v0 is
  preferred only), ``topic_partitions`` (null: every partition) of ``{topic, partitions}``,
  ``timeout_ms``; the answer has a top-level ``error_code`` from v1 and per partition
  ``{partition_id, error_code, error_message}`` under ``replica_election_results``.
* AlterPartitionReassignments (45) v0: ``timeout_ms``, ``topics`` of ``{name, partitions:
  [{partition_index, replicas}]}``, ``replicas`` null to cancel; the answer has a top-level
  error and per partition ``{partition_index, error_code, error_message}``.
* ListPartitionReassignments (46) v0: ``timeout_ms``, ``topics`` (null: all) of
  ``{name, partition_indexes}``; the answer lists the ongoing reassignments, each with
  ``replicas``, ``adding_replicas`` and ``removing_replicas``.

Per-partition outcomes are returned (None for success, else the
:class:`~strom.common.errors.KafkaError` of the code), as Kafka's Admin hands each partition
its own future; a top-level error raises.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from strom.client.conn import Connection
from strom.common.errors import KafkaError, UnsupportedVersionError, error_for
from strom.common.types import TopicPartition
from strom.protocol.versions import ApiKey

#: Sends ``build(conn)`` to the controller as ``api_key`` (retrying on NOT_CONTROLLER) and
#: returns the decoded response.
ToController = Callable[[int, Callable[[Connection], dict[str, Any]]], Awaitable[Any]]


class ElectionType(enum.IntEnum):
    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """An ongoing reassignment: the current replica set (old and new replicas together) and
    the replicas being added and removed."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = defaultdict(list)
    for tp in partitions:
        topics[tp.topic].append(tp.partition)
    return {topic: sorted(set(ids)) for topic, ids in sorted(topics.items())}


def _outcome(code: int, message: str | None) -> KafkaError | None:
    return error_for(code, message) if code else None


def _raise_top_level(response: Any) -> None:
    code = getattr(response, "error_code", 0)
    if code:
        raise error_for(code, getattr(response, "error_message", None))


def elect_leaders_request(conn: Connection, election_type: ElectionType,
                          partitions: Iterable[TopicPartition] | None, timeout_ms: int
                          ) -> dict[str, Any]:
    """The ElectLeaders fields for ``conn``'s negotiated version (v0 elects preferred
    leaders only: UnsupportedVersionError for an unclean election)."""
    fields: dict[str, Any] = {
        "topic_partitions": None if partitions is None else [
            {"topic": topic, "partitions": ids} for topic, ids in _by_topic(partitions).items()],
        "timeout_ms": timeout_ms}
    if conn.version(ApiKey.ELECT_LEADERS) >= 1:
        fields["election_type"] = int(election_type)
    elif election_type != ElectionType.PREFERRED:
        raise UnsupportedVersionError(
            f"broker {conn.address} supports only preferred leader elections (ElectLeaders v0)")
    return fields


def elect_leaders_result(response: Any) -> dict[TopicPartition, KafkaError | None]:
    _raise_top_level(response)
    return {TopicPartition(topic.topic, p.partition_id): _outcome(p.error_code, p.error_message)
            for topic in response.replica_election_results for p in topic.partition_result}


async def elect_leaders(to_controller: ToController, election_type: ElectionType,
                        partitions: Iterable[TopicPartition] | None, timeout_ms: int
                        ) -> dict[TopicPartition, KafkaError | None]:
    wanted = None if partitions is None else list(partitions)
    response = await to_controller(ApiKey.ELECT_LEADERS, lambda conn: elect_leaders_request(
        conn, election_type, wanted, timeout_ms))
    return elect_leaders_result(response)


def alter_reassignments_request(reassignments: Mapping[TopicPartition, Sequence[int] | None],
                                timeout_ms: int) -> dict[str, Any]:
    topics: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for tp, replicas in sorted(reassignments.items()):
        topics[tp.topic].append({"partition_index": tp.partition,
                                 "replicas": None if replicas is None else list(replicas)})
    return {"timeout_ms": timeout_ms,
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}


def alter_reassignments_result(response: Any) -> dict[TopicPartition, KafkaError | None]:
    _raise_top_level(response)
    return {TopicPartition(topic.name, p.partition_index): _outcome(p.error_code,
                                                                    p.error_message)
            for topic in response.responses for p in topic.partitions}


async def alter_partition_reassignments(
        to_controller: ToController,
        reassignments: Mapping[TopicPartition, Sequence[int] | None], timeout_ms: int
) -> dict[TopicPartition, KafkaError | None]:
    fields = alter_reassignments_request(reassignments, timeout_ms)
    response = await to_controller(ApiKey.ALTER_PARTITION_REASSIGNMENTS, lambda _conn: fields)
    return alter_reassignments_result(response)


def list_reassignments_request(partitions: Iterable[TopicPartition] | None,
                               timeout_ms: int) -> dict[str, Any]:
    return {"timeout_ms": timeout_ms, "topics": None if partitions is None else [
        {"name": topic, "partition_indexes": ids}
        for topic, ids in _by_topic(partitions).items()]}


def list_reassignments_result(response: Any) -> dict[TopicPartition, PartitionReassignment]:
    _raise_top_level(response)
    return {TopicPartition(topic.name, p.partition_index): PartitionReassignment(
                tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas))
            for topic in response.topics for p in topic.partitions}


async def list_partition_reassignments(
        to_controller: ToController, partitions: Iterable[TopicPartition] | None,
        timeout_ms: int) -> dict[TopicPartition, PartitionReassignment]:
    fields = list_reassignments_request(partitions, timeout_ms)
    response = await to_controller(ApiKey.LIST_PARTITION_REASSIGNMENTS, lambda _conn: fields)
    return list_reassignments_result(response)
