"""``strom leader-election`` and ``strom reassign``: argument and JSON handling, Kafka's output
lines, against the fake broker (its answers to ElectLeaders / AlterPartitionReassignments /
ListPartitionReassignments are scripted; the requests are decoded with kafka-python's
classes). End to end against a live cluster: tests/cli/test_e2e_partition_tools.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.cli.reassign_json import (
    ReassignmentDataError,
    format_reassignment,
    parse_broker_list,
    parse_reassignment,
    parse_topics_to_move,
)
from strom.client.sync import LoopThread
from strom.common.types import TopicPartition
from strom.protocol.versions import SUPPORTED
from tests.cli.conftest import Result
from tests.client.fake_broker import FakeBroker

Cli = Callable[..., Result]
# DescribeCluster left out: the fake answers the cluster from Metadata (one broker, id 0).
VERSIONS = {**{k: v for k, v in SUPPORTED.items() if k != 60},
            43: (0, 2), 45: (0, 0), 46: (0, 0)}


@pytest.fixture
def fake() -> Iterator[FakeBroker]:
    loop = LoopThread("fake-broker")
    broker = loop.run(FakeBroker(dict(VERSIONS)).start())
    broker.create("t", 3)
    try:
        yield broker
    finally:
        loop.run(broker.stop())
        loop.stop()


def reply(fields: dict[str, Any]) -> Any:
    async def hook(_key: int, _version: int, _request: Any) -> dict[str, Any]:
        return fields
    return hook


def requests(fake: FakeBroker, key: int) -> list[Any]:
    return [request for k, _v, request in fake.requests if k == key]


def partition_results(*results: tuple[int, int]) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": 0, "replica_election_results": [
        {"topic": "t", "partition_result": [
            {"partition_id": p, "error_code": code, "error_message": None}
            for p, code in results]}]}


NO_REASSIGNMENTS = {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                    "topics": []}


# -- leader-election -------------------------------------------------------------------------
def test_leader_election_prints_kafkas_lines(cli: Cli, fake: FakeBroker) -> None:
    fake.hooks[43] = reply(partition_results((0, 0), (2, 0), (1, 84)))
    out = cli("leader-election", "--bootstrap-server", fake.bootstrap, "--election-type",
              "PREFERRED", "--all-topic-partitions")
    assert out.code == 0, out.err
    assert out.out.splitlines() == [
        "Successfully completed leader election (PREFERRED) for partitions t-0, t-2",
        "Valid replica already elected for partitions t-1"]
    (request,) = requests(fake, 43)
    assert request.topic_partitions is None and request.election_type == 0


def test_leader_election_failures_exit_1(cli: Cli, fake: FakeBroker) -> None:
    fake.hooks[43] = reply(partition_results((0, 83)))
    out = cli("leader-election", "-b", fake.bootstrap, "--election-type", "unclean",
              "--topic", "t", "--partition", "0")
    assert out.code == 1
    assert out.out.startswith(
        "Error completing leader election (UNCLEAN) for partition: t-0: "
        "ELIGIBLE_LEADERS_NOT_AVAILABLE (83)")
    assert out.err == "strom leader-election: error: 1 replica(s) could not be elected\n"
    (request,) = requests(fake, 43)
    assert request.election_type == 1
    assert [(t.topic, list(t.partitions)) for t in request.topic_partitions] == [("t", [0])]


def test_leader_election_json_file(cli: Cli, fake: FakeBroker, tmp_path: Path) -> None:
    fake.hooks[43] = reply(partition_results((1, 0), (2, 0)))
    path = tmp_path / "elect.json"
    path.write_text('{"partitions": [{"topic": "t", "partition": 2}, '
                    '{"topic": "t", "partition": 1}]}')
    out = cli("leader-election", "-b", fake.bootstrap, "--election-type", "preferred",
              "--path-to-json-file", str(path))
    assert out.code == 0, out.err
    (request,) = requests(fake, 43)
    assert [(t.topic, list(t.partitions)) for t in request.topic_partitions] == [("t", [1, 2])]


@pytest.mark.parametrize("args, message", [
    (["--topic", "t"], "--partition is required with --topic"),
    (["--all-topic-partitions", "--partition", "1"], "--partition needs --topic"),
    (["--path-to-json-file", "{file}"], "Replica election data contains duplicate partitions: "
                                        "t-1"),
])
def test_leader_election_usage_errors(cli: Cli, fake: FakeBroker, tmp_path: Path,
                                      args: list[str], message: str) -> None:
    path = tmp_path / "dup.json"
    path.write_text('{"partitions": [{"topic": "t", "partition": 1}, '
                    '{"topic": "t", "partition": 1}]}')
    out = cli("leader-election", "-b", fake.bootstrap, "--election-type", "preferred",
              *[a.replace("{file}", str(path)) for a in args])
    assert out.code == 1 and out.err == f"strom leader-election: error: {message}\n"
    assert not requests(fake, 43)


@pytest.mark.parametrize("text, message", [
    ("{", "is not JSON"), ('{"x": []}', 'missing "partitions" field'),
    ('{"partitions": [{"topic": "t"}]}', 'missing or invalid "partition" in {"topic": "t"}'),
])
def test_leader_election_bad_json(cli: Cli, fake: FakeBroker, tmp_path: Path, text: str,
                                  message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    out = cli("leader-election", "-b", fake.bootstrap, "--election-type", "preferred",
              "--path-to-json-file", str(path))
    assert out.code == 1 and message in out.err


def test_leader_election_needs_one_target_and_a_type(cli: Cli) -> None:
    assert cli("leader-election", "--election-type", "preferred").code == 2
    assert cli("leader-election", "--all-topic-partitions").code == 2
    assert cli("leader-election", "--election-type", "preferred", "--all-topic-partitions",
               "--topic", "t").code == 2
    assert cli("leader-election", "--election-type", "random",
               "--all-topic-partitions").code == 2


# -- reassign JSON ---------------------------------------------------------------------------
def test_reassignment_json_round_trip() -> None:
    text = format_reassignment({TopicPartition("b", 0): [2, 1], TopicPartition("a", 1): [0]})
    assert text == ('{"version":1,"partitions":['
                    '{"topic":"a","partition":1,"replicas":[0],"log_dirs":["any"]},'
                    '{"topic":"b","partition":0,"replicas":[2,1],"log_dirs":["any","any"]}]}')
    assert parse_reassignment(text) == {TopicPartition("a", 1): [0],
                                        TopicPartition("b", 0): [2, 1]}
    assert parse_topics_to_move('{"topics": [{"topic": "a"}, {"topic": "b"}], "version": 1}'
                                ) == ["a", "b"]
    assert parse_broker_list("2,0,1") == [2, 0, 1]


@pytest.mark.parametrize("call, message", [
    (lambda: parse_topics_to_move('{"topics": [{"topic": "a"}, {"topic": "a"}]}'),
     "List of topics to reassign contains duplicate entries: a"),
    (lambda: parse_topics_to_move('{"version": 2, "topics": []}'),
     "Not supported version field value 2"),
    (lambda: parse_topics_to_move("nope"), "The input string is not a valid JSON"),
    (lambda: parse_broker_list("0,1,0"), "Broker list contains duplicate entries: 0"),
    (lambda: parse_broker_list("0,x"), "--broker-list expects broker ids"),
    (lambda: parse_reassignment('{"partitions": []}', for_execute=True),
     "Partition reassignment list cannot be empty"),
    (lambda: parse_reassignment('{"partitions": [{"topic": "t", "partition": 0, '
                                '"replicas": []}]}', for_execute=True),
     "Partition replica list cannot be empty"),
    (lambda: parse_reassignment('{"partitions": [{"topic": "t", "partition": 0, '
                                '"replicas": [1]}, {"topic": "t", "partition": 0, '
                                '"replicas": [2]}]}', for_execute=True),
     "Partition reassignment contains duplicate topic partitions: t-0"),
    (lambda: parse_reassignment('{"partitions": [{"topic": "t", "partition": 0, '
                                '"replicas": [1, 1]}]}', for_execute=True),
     "Partition replica lists may not contain duplicate entries: t-0 contains multiple "
     "entries for 1"),
    (lambda: parse_reassignment('{"partitions": [{"topic": "t", "partition": 0, '
                                '"replicas": [1], "log_dirs": ["/d"]}]}'),
     'log_dirs other than "any" are not supported'),
    (lambda: parse_reassignment('{"partitions": [{"topic": "t", "partition": 0, '
                                '"replicas": [1], "log_dirs": []}]}'),
     "Size of replicas list [1] is different from size of log dirs list [] for partition t-0"),
])
def test_reassignment_json_errors(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ReassignmentDataError) as raised:
        call()
    assert message in str(raised.value)


# -- reassign against the fake broker --------------------------------------------------------
def plan_file(tmp_path: Path, replicas: dict[int, list[int]]) -> str:
    path = tmp_path / "plan.json"
    path.write_text(format_reassignment({TopicPartition("t", p): r
                                         for p, r in replicas.items()}))
    return str(path)


def test_generate(cli: Cli, fake: FakeBroker, tmp_path: Path) -> None:
    topics = tmp_path / "topics.json"
    topics.write_text('{"topics": [{"topic": "t"}], "version": 1}')
    out = cli("reassign", "-b", fake.bootstrap, "--generate", "--topics-to-move-json-file",
              str(topics), "--broker-list", "0")
    assert out.code == 0, out.err
    current = format_reassignment({TopicPartition("t", p): [0] for p in range(3)})
    assert out.out.splitlines() == [
        "Current partition replica assignment", current, "",
        "Proposed partition reassignment configuration", current]


def test_execute_with_throttle(cli: Cli, fake: FakeBroker, tmp_path: Path) -> None:
    fake.hooks[46] = reply(NO_REASSIGNMENTS)
    fake.hooks[45] = reply({"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                            "responses": [{"name": "t", "partitions": [
                                {"partition_index": p, "error_code": 0, "error_message": None}
                                for p in (0, 1)]}]})
    plan = plan_file(tmp_path, {1: [0], 0: [0]})
    out = cli("reassign", "-b", fake.bootstrap, "--execute", "--reassignment-json-file", plan,
              "--throttle", "1000")
    assert out.code == 0, out.err
    assert out.out.splitlines() == [
        "Current partition replica assignment", "",
        format_reassignment({TopicPartition("t", 0): [0], TopicPartition("t", 1): [0]}), "",
        "Save this to use as the --reassignment-json-file option during rollback",
        "Warning: You must run --verify periodically, until the reassignment completes, to "
        "ensure the throttle is removed.",
        "The inter-broker throttle limit was set to 1000 B/s",
        "Successfully started partition reassignments for t-0,t-1"]
    (alter,) = requests(fake, 45)
    assert [(p.partition_index, p.replicas) for p in alter.topics[0].partitions] == [
        (0, [0]), (1, [0])]
    assert fake.configs["0"] == {"leader.replication.throttled.rate": "1000",
                                 "follower.replication.throttled.rate": "1000"}
    assert fake.configs["t"] == {"leader.replication.throttled.replicas": "0:0,1:0",
                                 "follower.replication.throttled.replicas": ""}


def test_execute_refusals(cli: Cli, fake: FakeBroker, tmp_path: Path) -> None:
    ongoing = {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
               "topics": [{"name": "t", "partitions": [
                   {"partition_index": 2, "replicas": [0, 1], "adding_replicas": [1],
                    "removing_replicas": [0]}]}]}
    fake.hooks[46] = reply(ongoing)
    b = ["reassign", "-b", fake.bootstrap, "--execute", "--reassignment-json-file"]
    out = cli(*b, plan_file(tmp_path, {0: [0]}))
    assert out.code == 1 and "Cannot execute because there is an existing partition " \
                             "assignment.  Use --additional" in out.err
    out = cli(*b, plan_file(tmp_path, {0: [7]}), "--additional")
    assert out.code == 1 and out.err == "strom reassign: error: Unknown broker id 7\n"
    fake.hooks[45] = reply({"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                            "responses": [{"name": "t", "partitions": [
                                {"partition_index": 0, "error_code": 39,
                                 "error_message": "Replica 0 is not alive"}]}]})
    out = cli(*b, plan_file(tmp_path, {0: [0]}), "--additional")
    assert out.code == 1 and out.err == (
        "strom reassign: error: Error reassigning partition(s):\n"
        "t-0: INVALID_REPLICA_ASSIGNMENT (39): Replica 0 is not alive\n")
    assert "Successfully started" not in out.out
    out = cli("reassign", "-b", fake.bootstrap, "--execute")
    assert out.code == 1 and "--reassignment-json-file is required" in out.err


def test_verify_cancel_and_list(cli: Cli, fake: FakeBroker, tmp_path: Path) -> None:
    ongoing = {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
               "topics": [{"name": "t", "partitions": [
                   {"partition_index": 2, "replicas": [0, 1], "adding_replicas": [1],
                    "removing_replicas": [0]}]}]}
    fake.hooks[46] = reply(ongoing)
    plan = plan_file(tmp_path, {0: [0], 1: [1], 2: [1]})
    b = ["reassign", "-b", fake.bootstrap]
    out = cli(*b, "--verify", "--reassignment-json-file", plan)
    assert out.code == 0, out.err
    assert out.out.splitlines() == [
        "Status of partition reassignment:",
        "Reassignment of partition t-0 is completed.",
        "There is no active reassignment of partition t-1, but replica set is 0 rather than 1.",
        "Reassignment of partition t-2 is still in progress."]  # no throttle cleared yet
    out = cli(*b, "--list")
    assert out.out.splitlines() == ["Current partition reassignments:",
                                    "t-2: replicas: 0,1. adding: 1. removing: 0."]
    fake.hooks[45] = reply({"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                            "responses": [{"name": "t", "partitions": [
                                {"partition_index": 2, "error_code": 0,
                                 "error_message": None}]}]})
    fake.configs["t"] = {"leader.replication.throttled.replicas": "2:0"}
    out = cli(*b, "--cancel", "--reassignment-json-file", plan)
    assert out.code == 0, out.err
    assert out.out.splitlines() == [
        "Successfully cancelled partition reassignment for: t-2",
        "Clearing broker-level throttles on broker 0",
        "Clearing topic-level throttles on topic t"]
    (cancelled,) = requests(fake, 45)
    assert [(p.partition_index, p.replicas) for p in cancelled.topics[0].partitions] == [
        (2, None)]
    assert fake.configs["t"] == {}

    fake.hooks[46] = reply(NO_REASSIGNMENTS)
    out = cli(*b, "--list")
    assert out.out == "No partition reassignments found.\n"
    out = cli(*b, "--verify", "--reassignment-json-file", plan, "--preserve-throttles")
    assert "Reassignment of partition t-2 is still in progress." not in out.out
    assert "Clearing" not in out.out
    out = cli(*b, "--cancel", "--reassignment-json-file", plan, "--preserve-throttles")
    assert out.out == "None of the specified partition reassignments are active.\n"
