"""delete-records, get-offsets, log-dirs, api-versions and cluster against a real strom
broker, cross-checked with confluent-kafka (librdkafka) and the data directory on disk."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient as KafkaAdmin

from strom.cli.api_versions import versions_text
from strom.client.admin_types import BrokerApiVersions
from strom.client.metadata import BrokerNode
from strom.client.sync import SyncAdminClient, SyncProducer
from strom.client.wire import CLIENT_VERSIONS
from strom.common.types import TopicPartition
from strom.protocol.versions import ADVERTISED, SUPPORTED, ApiKey, api_name
from tests.cli.conftest import Result
from tests.client.groups_e2e import bootstrap_of, unique


@pytest.fixture
def b(strom_broker: Any) -> list[str]:
    return ["--bootstrap-server", bootstrap_of(strom_broker)]


def make_topic(bootstrap: str, counts: dict[int, int], *, timestamps: bool = False) -> str:
    """A new topic with ``counts[p]`` records in partition ``p``; record ``i`` of each
    partition has timestamp 1000 * (i + 1) when ``timestamps``."""
    name = unique("verbs")
    with SyncAdminClient(bootstrap) as admin:
        admin.create_topic(name, len(counts), 1)
    with SyncProducer(bootstrap) as producer:
        for partition, count in counts.items():
            for i in range(count):
                producer.send(name, b"v%d" % i, partition=partition,
                              timestamp=1000 * (i + 1) if timestamps else None)
        producer.flush()
    return name


def start_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    """Each partition's log start offset, as librdkafka's watermark query reports it."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        return [consumer.get_watermark_offsets(KafkaTopicPartition(topic, p), timeout=10)[0]
                for p in range(partitions)]
    finally:
        consumer.close()


def test_delete_records(cli: Callable[..., Result], b: list[str], strom_broker: Any,
                        tmp_path: Path) -> None:
    bootstrap = bootstrap_of(strom_broker)
    topic = make_topic(bootstrap, {0: 10, 1: 10, 2: 4})

    one = cli("delete-records", "--topic", topic, "--partition", "0", "--offset", "3", *b)
    assert one.code == 0, one.err
    assert one.out == f"partition: {topic}-0\tlow_watermark: 3\n"
    assert one.err == "Executing records delete operation\nRecords delete operation completed:\n"

    spec = tmp_path / "offsets.json"
    spec.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 1, "offset": 7},
        {"topic": topic, "partition": 2, "offset": -1},
    ]}))
    by_file = cli("delete-records", "--offset-json-file", str(spec), *b)
    assert by_file.code == 0, by_file.err
    assert by_file.out == (f"partition: {topic}-1\tlow_watermark: 7\n"
                           f"partition: {topic}-2\tlow_watermark: 4\n")
    assert start_offsets(bootstrap, topic, 3) == [3, 7, 4]

    # Past the high watermark: Kafka's OFFSET_OUT_OF_RANGE for that partition, the others
    # still done, exit status 1.
    spec.write_text(json.dumps({"partitions": [
        {"topic": topic, "partition": 0, "offset": 5},
        {"topic": topic, "partition": 1, "offset": 11},
    ]}))
    mixed = cli("delete-records", "--offset-json-file", str(spec), *b)
    assert mixed.code == 1
    lines = mixed.out.splitlines()
    assert lines[0] == f"partition: {topic}-0\tlow_watermark: 5"
    assert lines[1].startswith(f"partition: {topic}-1\terror: OFFSET_OUT_OF_RANGE (1)")
    assert mixed.err.endswith("strom delete-records: error: 1 of 2 partitions failed\n")
    assert start_offsets(bootstrap, topic, 3) == [5, 7, 4]

    everything = cli("delete-records", "--topic", topic, "--offset", "-1", *b)
    assert everything.code == 0, everything.err
    assert [line.rsplit(" ", 1)[1] for line in everything.out.splitlines()] == ["10", "10", "4"]

    spec.write_text('{"partitions": [{"topic": "a", "partition": 0, "offset": 1}, '
                    '{"topic": "a", "partition": 0, "offset": 2}]}')
    dup = cli("delete-records", "--offset-json-file", str(spec), *b)
    assert dup.code == 1 and "duplicate topic partitions: a-0" in dup.err
    spec.write_text("{not json")
    bad = cli("delete-records", "--offset-json-file", str(spec), *b)
    assert bad.code == 1 and "is not valid JSON" in bad.err and bad.err.count("\n") == 1
    missing = cli("delete-records", "--topic", f"{topic}-nope", "--offset", "1", *b)
    assert missing.code == 1 and "does not exist" in missing.err


def test_get_offsets(cli: Callable[..., Result], b: list[str], strom_broker: Any) -> None:
    bootstrap = bootstrap_of(strom_broker)
    topic = make_topic(bootstrap, {0: 5, 1: 3, 2: 0}, timestamps=True)
    escaped = topic.replace("-", "\\-")

    latest = cli("get-offsets", "--topic", topic, *b)
    assert latest.code == 0, latest.err
    assert latest.out == f"{topic}:0:5\n{topic}:1:3\n{topic}:2:0\n"
    assert cli("get-offsets", "--topic", topic, "--time", "-1", *b).out == latest.out

    with SyncAdminClient(bootstrap) as admin:
        admin.delete_records({TopicPartition(topic, 0): 2})
    earliest = cli("get-offsets", "--topic", escaped, "--time", "earliest", *b)
    assert earliest.out == f"{topic}:0:2\n{topic}:1:0\n{topic}:2:0\n"
    assert cli("get-offsets", "--topic", topic, "--time", "-2", "--partitions", "0,2",
               *b).out == f"{topic}:0:2\n{topic}:2:0\n"

    # First offset at or after a time; none after the last record (left out, as Kafka).
    by_time = cli("get-offsets", "--topic", topic, "--time", "3000", *b)
    assert by_time.out == f"{topic}:0:2\n{topic}:1:2\n"
    assert cli("get-offsets", "--topic", topic, "--time", "1970-01-01T00:00:04Z",
               *b).out == f"{topic}:0:3\n"
    newest = cli("get-offsets", "--topic", topic, "--time", "max-timestamp", *b)
    assert newest.out == f"{topic}:0:4\n{topic}:1:2\n"

    # The topic is a regular expression over whole names.
    prefix = cli("get-offsets", "--topic", topic[:-2] + ".*", "--partitions", "1", *b)
    assert f"{topic}:1:3\n" in prefix.out
    assert cli("get-offsets", "--topic", topic[:-2], *b).code == 1  # not a whole-name match
    with SyncAdminClient(bootstrap) as admin:
        admin.find_coordinator("any")  # makes sure __consumer_offsets exists
    everything = cli("get-offsets", *b)
    assert f"{topic}:0:5\n" in everything.out and "__consumer_offsets:0:" in everything.out
    external = cli("get-offsets", "--exclude-internal-topics", *b)
    assert f"{topic}:0:5\n" in external.out and "__consumer_offsets" not in external.out
    none = cli("get-offsets", "--topic", "no-such-topic-.*", *b)
    assert none.code == 1
    assert none.err == ("strom get-offsets: error: could not match any topic-partitions with "
                        "the specified filters\n")
    assert SUPPORTED[ApiKey.LIST_OFFSETS][1] >= 9  # latest-tiered: ListOffsets v9+
    tiered = cli("get-offsets", "--topic", topic, "--time", "latest-tiered", *b)
    assert (tiered.code, tiered.out) == (0, "")  # no tiered storage: offset -1, not printed
    local = cli("get-offsets", "--topic", topic, "--time", "earliest-local", *b)
    assert local.out == earliest.out  # no tiered storage: the local log is the whole log


def test_log_dirs(cli: Callable[..., Result], b: list[str], strom_broker: Any) -> None:
    bootstrap = bootstrap_of(strom_broker)
    topic = make_topic(bootstrap, {0: 20, 1: 0})
    result = cli("log-dirs", "--describe", "--topic-list", topic, *b)
    assert result.code == 0, result.err
    assert result.err == ("Querying brokers for log directories information\n"
                          "Received log directory information from brokers 0\n")
    document = json.loads(result.out)
    [broker] = document["brokers"]
    [log_dir] = broker["logDirs"]
    assert document["version"] == 1 and broker["broker"] == 0 and log_dir["error"] is None
    data_dir = getattr(strom_broker, "data_dir", None)
    if data_dir is not None:
        assert Path(log_dir["logDir"]) == Path(data_dir).resolve()
        sizes = [sum(f.stat().st_size for f in (Path(data_dir) / f"{topic}-{p}").glob("*.log"))
                 for p in (0, 1)]
    else:
        sizes = [log_dir["partitions"][0]["size"], 0]
    assert log_dir["partitions"] == [
        {"partition": f"{topic}-0", "size": sizes[0], "offsetLag": 0, "isFuture": False},
        {"partition": f"{topic}-1", "size": 0, "offsetLag": 0, "isFuture": False},
    ]
    assert sizes[0] > 0
    everything = json.loads(cli("log-dirs", "--broker-list", "0", *b).out)
    names = {p["partition"] for p in everything["brokers"][0]["logDirs"][0]["partitions"]}
    assert {f"{topic}-0", f"{topic}-1"} <= names
    unknown = cli("log-dirs", "--broker-list", "0,7", *b)
    assert unknown.code == 1
    assert unknown.err == ("strom log-dirs: error: the given brokers do not exist from "
                           "--broker-list: 7. Current existent brokers: 0\n")


def test_api_versions(cli: Callable[..., Result], b: list[str], strom_broker: Any) -> None:
    result = cli("api-versions", *b)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    host, port = bootstrap_of(strom_broker).rsplit(":", 1)
    assert lines[0] == f"{host}:{port} (id: 0 rack: null) -> ("
    assert lines[-1] == ")"
    body = [line.strip().rstrip(",") for line in lines[1:-1]]
    # everything the broker advertises, and (as Kafka's tool) the APIs only the client speaks
    client_only = [key for key in CLIENT_VERSIONS if key not in ADVERTISED]
    assert len(body) == len(ADVERTISED) + len(client_only)
    for key, (low, high) in ADVERTISED.items():
        text = f"{low}" if low == high else f"{low} to {high}"
        assert any(line.startswith(f"{api_name(key)}({key}): {text}") for line in body), key
    assert f"Fetch(1): {ADVERTISED[1][0]} to {ADVERTISED[1][1]} [usable: 12]" in body
    assert f"Produce(0): 0 to {ADVERTISED[0][1]} [usable: 11]" in body
    assert "ApiVersions(18): 0 to 4 [usable: 4]" in body
    assert [line for line in body if "UNSUPPORTED" in line] == [
        f"{api_name(key)}({key}): UNSUPPORTED" for key in sorted(client_only)]


def test_api_versions_text_for_other_brokers() -> None:
    """What a Kafka broker's answer would look like: APIs strom's client does not speak,
    ranges that do not meet the client's, keys missing or unknown."""
    text = versions_text(BrokerApiVersions(
        BrokerNode(3, "kafka", 9092, "r1"),
        ranges={0: (0, 2), 18: (0, 4), 23: (2, 4), 60: (0, 0), 200: (0, 1)},
        usable={18: 3, 60: 0},
    ))
    lines = text.splitlines()
    assert lines[0] == "(" and lines[-1] == ")"
    assert lines[1] == "\tProduce(0): 0 to 2 [unusable: node too old],"
    assert lines[2] == "\tFetch(1): UNSUPPORTED,"  # spoken by strom's client, not offered
    assert "\tOffsetForLeaderEpoch(23): 2 to 4," in lines  # offered, not spoken by the client
    assert "\tApiVersions(18): 0 to 4 [usable: 3]," in lines
    assert "\tDescribeCluster(60): 0 [usable: 0]," in lines
    assert lines[-2] == "\tUNKNOWN(200): 0 to 1"


def test_cluster(cli: Callable[..., Result], b: list[str], strom_broker: Any) -> None:
    bootstrap = bootstrap_of(strom_broker)
    metadata = KafkaAdmin({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    host, port = bootstrap.rsplit(":", 1)
    described = cli("cluster", *b)
    assert described.code == 0, described.err
    assert described.out.splitlines() == [
        f"Cluster ID: {metadata.cluster_id}",
        f"Controller: {metadata.controller_id} ({bootstrap})",
        f"ID  {'HOST'.ljust(len(host))}  {'PORT'.ljust(len(port))}  RACK",
        f"0   {host}  {port}  null",
    ]
    only_id = cli("cluster", "cluster-id", *b)
    assert only_id.out == f"Cluster ID: {metadata.cluster_id}\n"


def test_admin_verbs_take_a_command_config(cli: Callable[..., Result], strom_broker: Any,
                                           tmp_path: Path) -> None:
    config = tmp_path / "admin.properties"
    config.write_text(f"bootstrap.servers={bootstrap_of(strom_broker)}\n"
                      "client.id=ops\nrequest.timeout.ms=10000\n")
    started = time.monotonic()
    result = cli("cluster", "cluster-id", "--command-config", str(config))
    assert result.code == 0 and result.out.startswith("Cluster ID: ")
    assert time.monotonic() - started < 10
