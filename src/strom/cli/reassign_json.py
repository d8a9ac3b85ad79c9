"""The JSON files of kafka-reassign-partitions.sh, parsed and written as Kafka does.

Topics to move (``--topics-to-move-json-file``), version 1 (the default)::

    {"version": 1, "topics": [{"topic": "foo"}, {"topic": "bar"}]}

A reassignment (``--reassignment-json-file``; also what ``--generate`` and ``--execute``
print), version 1; ``log_dirs`` is optional and only ``"any"`` is accepted (strom has no
AlterReplicaLogDirs)::

    {"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1,2],"log_dirs":["any","any"]}]}

Written compactly (no spaces), partitions sorted by topic then partition, as Kafka's
``formatAsReassignmentJson``. Problems raise :class:`ReassignmentDataError` with Kafka's
wording where Kafka has one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from strom.common.errors import StromError
from strom.common.types import TopicPartition

ANY_LOG_DIR = "any"


class ReassignmentDataError(StromError):
    """A JSON file or argument of the reassignment tool is invalid."""


def _load(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        raise ReassignmentDataError("The input string is not a valid JSON") from None
    if not isinstance(data, dict):
        raise ReassignmentDataError("The input string is not a JSON object")
    version = data.get("version", 1)
    if version != 1:
        raise ReassignmentDataError(f"Not supported version field value {version}")
    return data


def json_array(data: Mapping[str, Any], key: str) -> list[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise ReassignmentDataError(f'"{key}" must be a JSON array')
    return value


def json_field(item: Any, key: str, kind: type) -> Any:
    """``item[key]`` when ``item`` is an object and the value a ``kind`` (bools are not
    ints); ReassignmentDataError naming the item otherwise."""
    value = item.get(key) if isinstance(item, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ReassignmentDataError(f'missing or invalid "{key}" in {json.dumps(item)}')
    return value


def duplicates(values: Sequence[Any]) -> list[Any]:
    return sorted({v for v in values if values.count(v) > 1}, key=str)


def parse_topics_to_move(text: str) -> list[str]:
    """The topic names of a topics-to-move file (duplicates refused)."""
    topics = [json_field(item, "topic", str) for item in json_array(_load(text), "topics")]
    repeated = duplicates(topics)
    if repeated:
        raise ReassignmentDataError(
            f"List of topics to reassign contains duplicate entries: {', '.join(repeated)}")
    return topics


def parse_broker_list(text: str) -> list[int]:
    """``--broker-list "0,1,2"`` (duplicates refused)."""
    try:
        brokers = [int(item) for item in text.split(",")]
    except ValueError:
        raise ReassignmentDataError(f"--broker-list expects broker ids like 0,1,2, got {text!r}"
                                    ) from None
    repeated = duplicates(brokers)
    if repeated:
        raise ReassignmentDataError("Broker list contains duplicate entries: "
                                    + ", ".join(map(str, repeated)))
    return brokers


def parse_reassignment(text: str, *, for_execute: bool = False
                       ) -> dict[TopicPartition, list[int]]:
    """Target replicas per partition. ``for_execute`` adds --execute's checks: a non-empty
    list, no partition twice, no replica twice in a partition."""
    entries: list[tuple[TopicPartition, list[int]]] = []
    for item in json_array(_load(text), "partitions"):
        tp = TopicPartition(json_field(item, "topic", str), json_field(item, "partition", int))
        replicas = json_field(item, "replicas", list)
        if not all(isinstance(r, int) and not isinstance(r, bool) for r in replicas):
            raise ReassignmentDataError(f'"replicas" must be broker ids in {json.dumps(item)}')
        dirs = item.get("log_dirs", [ANY_LOG_DIR] * len(replicas))
        if not isinstance(dirs, list) or len(dirs) != len(replicas):
            raise ReassignmentDataError(
                f"Size of replicas list {replicas} is different from size of log dirs list "
                f"{dirs} for partition {_name(tp)}")
        if any(d != ANY_LOG_DIR for d in dirs):
            raise ReassignmentDataError(
                f"log_dirs other than \"any\" are not supported (partition {_name(tp)})")
        entries.append((tp, list(replicas)))
    if for_execute:
        _check_for_execute(entries)
    return dict(entries)


def _check_for_execute(entries: list[tuple[TopicPartition, list[int]]]) -> None:
    if not entries:
        raise ReassignmentDataError("Partition reassignment list cannot be empty")
    if any(not replicas for _tp, replicas in entries):
        raise ReassignmentDataError("Partition replica list cannot be empty")
    repeated = duplicates([tp for tp, _r in entries])
    if repeated:
        raise ReassignmentDataError("Partition reassignment contains duplicate topic "
                                    "partitions: " + ",".join(_name(tp) for tp in repeated))
    within = [f"{_name(tp)} contains multiple entries for {','.join(map(str, twice))}"
              for tp, replicas in entries if (twice := duplicates(replicas))]
    if within:
        raise ReassignmentDataError("Partition replica lists may not contain duplicate "
                                    "entries: " + ". ".join(within))


def format_reassignment(assignment: Mapping[TopicPartition, Sequence[int]]) -> str:
    """Kafka's reassignment JSON, compact, partitions sorted."""
    partitions = [{"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas),
                   "log_dirs": [ANY_LOG_DIR] * len(replicas)}
                  for tp, replicas in sorted(assignment.items())]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


def _name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"
