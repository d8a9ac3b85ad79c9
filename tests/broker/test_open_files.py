"""File descriptors: hundreds of partitions under ``ulimit -n 1024``, topic creation that fails
half-way leaving nothing behind, and a broker out of descriptors that says so and keeps
serving (confluent-kafka as the user ran it, and exact requests on the wire)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from strom.common.errors import ErrorCode
from strom.protocol.versions import ApiKey
from strom.testing import EmbeddedBroker
from tests.broker.raw import RawClient
from tests.broker.test_data_path import batch, fetch, produce

TOPICS = [f"fd{t}" for t in range(4)]
PARTITIONS = 100


def produce_to_every_partition(bootstrap: str, tag: str) -> set[bytes]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    errors: list[object] = []
    sent = set()
    for topic in TOPICS:
        for p in range(PARTITIONS):
            value = f"{tag}-{topic}-{p}".encode()
            sent.add(value)
            producer.produce(topic, value, partition=p,
                             on_delivery=lambda err, _msg: err and errors.append(err))
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    return sent


def consume(bootstrap: str, starts: list[TopicPartition], count: int,
            commit: bool = False) -> set[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fd-readers",
                         "enable.auto.commit": False})
    consumer.assign(starts)
    seen: set[bytes] = set()
    deadline = time.monotonic() + 90
    while len(seen) < count and time.monotonic() < deadline:
        for msg in consumer.consume(500, 0.5):
            if msg.error():
                raise AssertionError(msg.error())
            seen.add(msg.value())
    if commit:
        consumer.commit(asynchronous=False)
    consumer.close()
    return seen


def every_partition(offset: int) -> list[TopicPartition]:
    return [TopicPartition(t, p, offset) for t in TOPICS for p in range(PARTITIONS)]


def open_log_files(pid: int) -> int:
    fd_dir = Path(f"/proc/{pid}/fd")
    count = 0
    for fd in os.listdir(fd_dir):
        try:
            count += os.readlink(fd_dir / fd).endswith(".log")
        except OSError:
            continue  # closed meanwhile
    return count


def test_400_partitions_under_ulimit_1024_produce_consume_and_restart(tmp_path: Path) -> None:
    with EmbeddedBroker(data_dir=tmp_path, open_file_limit=1024) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        futures = admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in TOPICS],
                                      operation_timeout=30)
        for future in futures.values():
            future.result(60)
        assert len(list(tmp_path.glob("fd*-*"))) == 4 * PARTITIONS
        first = produce_to_every_partition(broker.bootstrap, "first")
        # Committing creates __consumer_offsets too: 450 partitions in all.
        assert consume(broker.bootstrap, every_partition(-2), len(first), commit=True) == first

        # Same limit, and a pool far smaller than the partitions: idle files close and reopen.
        broker.config["log.max.open.files"] = 64
        broker.restart()
        assert consume(broker.bootstrap, every_partition(-2), len(first)) == first
        assert broker.process is not None and open_log_files(broker.process.pid) <= 64
        second = produce_to_every_partition(broker.bootstrap, "second")
        # From the committed offsets (restored after the restart): exactly the new records.
        assert consume(broker.bootstrap, every_partition(-1000), len(second)) == second
        assert open_log_files(broker.process.pid) <= 64
    output = "".join(broker.output)
    assert "Traceback" not in output and "open files" not in output


def storage_error(future: object) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(30)  # type: ignore[attr-defined]
    error: KafkaError = info.value.args[0]
    assert error.code() == KafkaError.KAFKA_STORAGE_ERROR
    return error


def test_topic_creation_failing_half_way_leaves_nothing_and_the_retry_works(
    tmp_path: Path,
) -> None:
    with EmbeddedBroker(data_dir=tmp_path) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        # A file where partition 5's directory must go: creating its log fails half-way.
        blocker = tmp_path / "half-5"
        blocker.write_text("not a directory")
        error = storage_error(admin.create_topics([NewTopic("half", 10, 1)])["half"])
        assert "half-5" in error.str()
        assert [p.name for p in tmp_path.glob("half-*")] == ["half-5"]  # no partition left
        assert "half" not in admin.list_topics(timeout=10).topics  # no metadata either

        # Adding partitions is all or nothing too.
        admin.create_topics([NewTopic("grow", 2, 1)])["grow"].result(30)
        (tmp_path / "grow-3").write_text("not a directory")
        storage_error(admin.create_partitions([NewPartitions("grow", 5)])["grow"])
        assert len(admin.list_topics(timeout=10).topics["grow"].partitions) == 2
        assert sorted(p.name for p in tmp_path.glob("grow-*")) == ["grow-0", "grow-1", "grow-3"]

        # The retries start from a clean slate (no TOPIC_ALREADY_EXISTS) and work.
        blocker.unlink()
        (tmp_path / "grow-3").unlink()
        admin.create_topics([NewTopic("half", 10, 1)])["half"].result(30)
        admin.create_partitions([NewPartitions("grow", 5)])["grow"].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for topic, count in (("half", 10), ("grow", 5)):
            for p in range(count):
                producer.produce(topic, f"{topic}{p}".encode(), partition=p)
        assert producer.flush(30) == 0
        broker.restart()
        starts = [TopicPartition("half", p, -2) for p in range(10)]
        starts += [TopicPartition("grow", p, -2) for p in range(5)]
        expected = {f"half{p}".encode() for p in range(10)} | {f"grow{p}".encode()
                                                              for p in range(5)}
        assert consume(broker.bootstrap, starts, 15) == expected


def answers(bootstrap: str) -> RawClient | None:
    """A connection the broker accepted and answers on, or None (it could not accept)."""
    client = RawClient(bootstrap, timeout=1.0)
    try:
        client.call(ApiKey.API_VERSIONS, 0, {})
    except TimeoutError:
        client.sock.settimeout(None)  # left queued: it takes the next descriptor freed
        return None
    return client


def create_request(client: RawClient, name: str) -> tuple[int, str | None]:
    resp = client.call(ApiKey.CREATE_TOPICS, 7, {"topics": [
        {"name": name, "num_partitions": 3, "replication_factor": 1, "assignments": [],
         "configs": []}], "timeout_ms": 1000, "validate_only": False})
    return resp.topics[0].error_code, resp.topics[0].error_message


def test_a_broker_out_of_descriptors_says_so_and_keeps_serving(tmp_path: Path) -> None:
    with EmbeddedBroker(data_dir=tmp_path, open_file_limit=64) as broker:
        client = RawClient(broker.bootstrap)
        flood: list[RawClient] = []
        while (accepted := answers(broker.bootstrap)) is not None:
            flood.append(accepted)
            assert len(flood) < 64
        flood += [RawClient(broker.bootstrap) for _ in range(4)]  # queued behind it
        # No descriptor left, and no idle segment file to close for one: a clear error.
        code, message = create_request(client, "starved")
        assert code == ErrorCode.KAFKA_STORAGE_ERROR  # type: ignore[attr-defined]
        assert message is not None and "open-file limit is 64" in message
        assert "log.max.open.files" in message
        assert not list(tmp_path.glob("starved-*"))  # all or nothing
        # Still serving its connections meanwhile; the failed topic does not exist.
        md = client.call(ApiKey.METADATA, 12, {"topics": [{"name": "starved", "topic_id": None}],
                                              "allow_auto_topic_creation": False,
                                              "include_topic_authorized_operations": False})
        assert md.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # type: ignore[attr-defined]

        for other in flood:
            other.close()
        deadline = time.monotonic() + 20
        while (code := create_request(client, "starved")[0]) and time.monotonic() < deadline:
            time.sleep(0.2)  # until the broker noticed the closed connections
        assert code == 0
        for p in range(3):
            assert produce(client, "starved", batch([b"after"]), partition=p)[0] == 0
        assert fetch(client, "starved", 0).error_code == 0  # type: ignore[attr-defined]
        client.close()
    errors = [line for line in broker.output if "open-file limit is 64" in line]
    assert errors and "ERROR" in errors[0] and "log.max.open.files" in errors[0]
