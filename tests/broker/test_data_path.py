"""Produce / Fetch / ListOffsets behaviour over real sockets with exact requests."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from strom.common.errors import ErrorCode
from strom.protocol.records.builder import BatchBuilder
from strom.protocol.records.reader import decode_batches
from strom.protocol.versions import ApiKey
from strom.testing import EmbeddedBroker
from tests.broker.raw import RawClient


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


def create(client: RawClient, name: str, partitions: int = 1) -> None:
    resp = client.call(ApiKey.CREATE_TOPICS, 7, {"topics": [
        {"name": name, "num_partitions": partitions, "replication_factor": 1,
         "assignments": [], "configs": []}], "timeout_ms": 1000, "validate_only": False})
    assert resp.topics[0].error_code == 0


def batch(values: list[bytes], pid: int = -1, epoch: int = -1, seq: int = -1,
          timestamps: list[int] | None = None) -> bytes:
    builder = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    now = int(time.time() * 1000)
    for i, v in enumerate(values):
        builder.append(timestamps[i] if timestamps else now, None, v)
    return builder.build()


def produce(client: RawClient, topic: str, records: bytes, partition: int = 0,
            acks: int = -1) -> tuple[int, int]:
    resp = client.call(ApiKey.PRODUCE, 9, {
        "transactional_id": None, "acks": acks, "timeout_ms": 1000,
        "topic_data": [{"name": topic, "partition_data": [
            {"index": partition, "records": records}]}]})
    p = resp.responses[0].partition_responses[0]
    return int(p.error_code), int(p.base_offset)


def list_offset(client: RawClient, topic: str, timestamp: int) -> tuple[int, int, int]:
    resp = client.call(ApiKey.LIST_OFFSETS, 8, {"replica_id": -1, "isolation_level": 0,
                                                "topics": [{"name": topic, "partitions": [
        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}]}]})
    p = resp.topics[0].partitions[0]
    return int(p.error_code), int(p.offset), int(p.timestamp)


def fetch(client: RawClient, topic: str, offset: int, max_wait_ms: int = 0,
          min_bytes: int = 1) -> object:
    return client.call(ApiKey.FETCH, 12, {
        "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes,
        "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
             "last_fetched_epoch": -1, "log_start_offset": -1,
             "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": ""}).responses[0].partitions[0]  # type: ignore[no-any-return]


def test_idempotent_duplicates_and_gaps(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap)
    create(client, "idem")
    pid = client.call(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None,
                                                   "transaction_timeout_ms": 60000,
                                                   "producer_id": -1, "producer_epoch": -1})
    assert pid.error_code == 0 and pid.producer_id >= 0
    first = batch([b"a", b"b"], pid.producer_id, 0, 0)
    assert produce(client, "idem", first) == (0, 0)
    second = batch([b"c"], pid.producer_id, 0, 2)
    assert produce(client, "idem", second) == (0, 2)
    # A retry of an already-written batch is acknowledged with its original offset...
    assert produce(client, "idem", first) == (0, 0)
    # ...and nothing is written again.
    assert list_offset(client, "idem", -1)[1] == 3
    # A gap in sequence numbers is refused.
    gap = batch([b"d"], pid.producer_id, 0, 9)
    assert produce(client, "idem", gap)[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # type: ignore[attr-defined]
    # The state survives a restart.
    client.close()
    broker.restart()
    client = RawClient(broker.bootstrap)
    assert produce(client, "idem", second) == (0, 2)
    assert produce(client, "idem", batch([b"d"], pid.producer_id, 0, 3)) == (0, 3)
    client.close()


def test_list_offsets_exact_timestamps_and_max(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap)
    create(client, "times")
    base = int(time.time() * 1000) - 60_000
    # One batch whose records carry different timestamps, out of order.
    stamps = [base + 30, base + 10, base + 50, base + 20, base + 40]
    assert produce(client, "times", batch([b"%d" % i for i in range(5)],
                                          timestamps=stamps))[0] == 0
    assert list_offset(client, "times", base + 15) == (0, 0, base + 30)
    assert list_offset(client, "times", base + 35) == (0, 2, base + 50)
    assert list_offset(client, "times", base + 45)[1:] == (2, base + 50)
    assert list_offset(client, "times", base + 51)[1] == -1
    assert list_offset(client, "times", -3) == (0, 2, base + 50)   # max timestamp
    assert list_offset(client, "times", -2)[1] == 0                # earliest
    assert list_offset(client, "times", -1)[1] == 5                # latest
    client.close()


def test_parked_fetch_wakes_when_data_arrives(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap, timeout=60)
    create(client, "park")
    result: dict[str, object] = {}

    def park() -> None:
        start = time.monotonic()
        result["partition"] = fetch(client, "park", 0, max_wait_ms=30_000)
        result["elapsed"] = time.monotonic() - start

    thread = threading.Thread(target=park)
    thread.start()
    time.sleep(0.5)
    producer = RawClient(broker.bootstrap)
    assert produce(producer, "park", batch([b"wake up"]))[0] == 0
    thread.join(40)
    partition = result["partition"]
    # Answered with the data long before the 30 s max wait.
    assert float(result["elapsed"]) < 15  # type: ignore[arg-type]
    records = [r.value for _, rs in decode_batches(partition.records) for r in rs]  # type: ignore[attr-defined]
    assert records == [b"wake up"]
    assert partition.high_watermark == 1  # type: ignore[attr-defined]
    client.close()
    producer.close()


def test_fetch_errors(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap)
    create(client, "ferr")
    produce(client, "ferr", batch([b"x"]))
    out_of_range = fetch(client, "ferr", 5)
    assert out_of_range.error_code == ErrorCode.OFFSET_OUT_OF_RANGE  # type: ignore[attr-defined]
    assert out_of_range.high_watermark == 1  # type: ignore[attr-defined]
    assert fetch(client, "nope", 0).error_code == (  # type: ignore[attr-defined]
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)  # type: ignore[attr-defined]
    at_end = fetch(client, "ferr", 1)
    assert at_end.error_code == 0 and not at_end.records  # type: ignore[attr-defined]
    client.close()


def test_offset_for_leader_epoch(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap)
    create(client, "epochs")
    for _ in range(3):
        produce(client, "epochs", batch([b"e"]))

    def ask(current: int, epoch: int) -> tuple[int, int, int]:
        resp = client.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1, "topics": [
            {"topic": "epochs", "partitions": [
                {"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}]}]})
        p = resp.topics[0].partitions[0]
        return int(p.error_code), int(p.leader_epoch), int(p.end_offset)

    assert ask(-1, 0) == (0, 0, 3)
    assert ask(0, 0) == (0, 0, 3)
    assert ask(5, 0)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH  # type: ignore[attr-defined]
    assert ask(-1, 7)[1:] == (-1, -1)
    client.close()


def test_fetch_by_topic_id(broker: EmbeddedBroker) -> None:
    """Fetch v13+ names topics by id (KIP-516); unknown ids get UNKNOWN_TOPIC_ID."""
    client = RawClient(broker.bootstrap)
    create(client, "by-id")
    produce(client, "by-id", batch([b"one", b"two"]))
    md = client.call(ApiKey.METADATA, 12, {"topics": [{"name": "by-id", "topic_id": None}],
                                           "allow_auto_topic_creation": False,
                                           "include_topic_authorized_operations": False})
    topic_id = md.topics[0].topic_id

    def fetch_id(tid: object) -> object:
        return client.call(ApiKey.FETCH, 16, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic_id": tid, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                 "last_fetched_epoch": -1, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}).responses[0]

    found = fetch_id(topic_id)
    assert found.topic_id == topic_id  # type: ignore[attr-defined]
    part = found.partitions[0]  # type: ignore[attr-defined]
    assert [r.value for _, rs in decode_batches(part.records) for r in rs] == [b"one", b"two"]
    missing = fetch_id(uuid.uuid4())
    assert missing.partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID  # type: ignore[attr-defined]
    client.close()
