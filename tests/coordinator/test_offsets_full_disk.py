"""End to end over real sockets: offset commits on a durable broker, and on a full disk.

The broker runs in a subprocess with RLIMIT_FSIZE (writes past it fail with EFBIG, as on a
full disk). Offset commits fill their ``__consumer_offsets`` partition until one fails: that
commit gets Kafka's error for a storage failure (NOT_COORDINATOR), OffsetFetch keeps returning
the last commit that succeeded, and the broker keeps serving. On a full file system (a small
tmpfs) a librdkafka group consumer waits for its coordinator without losing its connection.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka import KafkaError as ConfluentError

from strom.common.errors import ErrorCode
from strom.coordinator.group.records import partition_for
from strom.protocol.versions import ApiKey
from strom.testing import EmbeddedBroker
from tests.broker.raw import RawClient
from tests.broker.test_data_path import create
from tests.full_disk import fill, leftover_tmp_files, small_disk

E = ErrorCode
LIMIT = 64 * 1024
PARTITIONS = 4


def commit(client: RawClient, group: str, offset: int, metadata: str) -> int:
    resp = client.call(ApiKey.OFFSET_COMMIT, 8, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"name": "t", "partitions": [
            {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
             "committed_metadata": metadata}]}]})
    return int(resp.topics[0].partitions[0].error_code)


def fetch_offset(client: RawClient, group: str) -> tuple[int, int]:
    resp = client.call(ApiKey.OFFSET_FETCH, 7, {
        "group_id": group, "topics": [{"name": "t", "partition_indexes": [0]}],
        "require_stable": False})
    return int(resp.error_code), int(resp.topics[0].partitions[0].committed_offset)


def call(client: RawClient, api: int, version: int, fields: dict[str, Any]) -> Any:
    return client.call(api, version, fields)


def test_offset_commit_on_a_full_disk_fails_closed(tmp_path: Path) -> None:
    def limit_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))

    proc = subprocess.Popen(
        [sys.executable, "-m", "strom", "broker", "--listen", "127.0.0.1:0",
         "--data-dir", str(tmp_path), "--set", f"offsets.topic.num.partitions={PARTITIONS}"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, preexec_fn=limit_files)
    try:
        assert proc.stdout is not None
        bootstrap = proc.stdout.readline().split("listening on ")[1].split()[0]
        client = RawClient(bootstrap)
        create(client, "t")
        found = call(client, ApiKey.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
        assert found.error_code == 0
        # Each commit writes ~2 KB to g's partition: the file limit is reached in ~30.
        metadata = "m" * 2000
        error, last_ok = 0, -1
        for offset in range(100):
            error = commit(client, "g", offset, metadata)
            if error:
                break
            last_ok = offset
        assert error == E.NOT_COORDINATOR  # type: ignore[attr-defined]
        assert 0 <= last_ok < 99
        # The failed commit is not visible; the last durable one is.
        assert fetch_offset(client, "g") == (0, last_ok)
        assert commit(client, "g", 1000, metadata) == E.NOT_COORDINATOR  # type: ignore[attr-defined]
        assert fetch_offset(client, "g") == (0, last_ok)
        # The broker keeps serving: metadata, group reads, and groups of other partitions.
        md = call(client, ApiKey.METADATA, 12, {"topics": None,
                                                "allow_auto_topic_creation": False,
                                                "include_topic_authorized_operations": False})
        assert "t" in [t.name for t in md.topics]
        described = call(client, ApiKey.DESCRIBE_GROUPS, 5, {
            "groups": ["g"], "include_authorized_operations": False}).groups[0]
        assert (described.error_code, described.group_state) == (0, "Empty")
        other = next(f"o{i}" for i in range(100)
                     if partition_for(f"o{i}", PARTITIONS) != partition_for("g", PARTITIONS))
        assert commit(client, other, 7, "") == 0
        assert fetch_offset(client, other) == (0, 7)
        client.close()
    finally:
        proc.terminate()
        proc.wait(20)


def test_offset_commit_on_a_durable_broker_waits_for_its_fsync(tmp_path: Path) -> None:
    config = {"log.flush.interval.messages": 1, "offsets.topic.num.partitions": PARTITIONS}
    with EmbeddedBroker(config=config, data_dir=tmp_path) as broker:
        client = RawClient(broker.bootstrap)
        create(client, "t")
        assert call(client, ApiKey.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0}
                    ).error_code == 0
        for offset in range(5):
            assert commit(client, "g", offset, "meta") == 0
            assert fetch_offset(client, "g") == (0, offset)
        client.close()


def test_group_consumer_keeps_its_connection_on_a_full_disk(tmp_path: Path) -> None:
    """librdkafka's FindCoordinator on a full disk (``__consumer_offsets`` cannot be created)
    gets COORDINATOR_NOT_AVAILABLE and retries on the same connection; once space is freed
    the consumer joins and consumes, and commits."""
    config = {"offsets.topic.num.partitions": PARTITIONS, "group.initial.rebalance.delay.ms": 0}
    with small_disk(tmp_path / "disk") as disk, \
            EmbeddedBroker(config=config, data_dir=disk / "data") as broker:
        client = RawClient(broker.bootstrap)
        create(client, "t")
        client.close()
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(10):
            producer.produce("t", value=b"v%d" % i)
        assert producer.flush(30) == 0
        filler = fill(disk)
        errors: list[Any] = []
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "full",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False,
                             "error_cb": errors.append})
        try:
            consumer.subscribe(["t"])
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline:  # no coordinator: no assignment, no records
                assert consumer.poll(0.2) is None
            assert leftover_tmp_files(disk / "data") == []
            filler.unlink()
            values: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(values) < 10 and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is not None and not msg.error():
                    values.append(msg.value())
            assert sorted(values) == sorted(b"v%d" % i for i in range(10))
            committed = consumer.commit(asynchronous=False)
            assert committed is not None and committed[0].offset == 10
        finally:
            consumer.close()
        assert not [e for e in errors if e.code() == ConfluentError._TRANSPORT], errors
        output = "".join(broker.output)
    assert "Traceback" not in output and "closing" not in output, output
    assert sum("is failing" in line for line in output.splitlines()) == 1, output
