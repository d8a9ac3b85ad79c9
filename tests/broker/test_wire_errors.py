"""Bad input gets Kafka's error (or closes only the offending connection); nothing is appended."""

from __future__ import annotations

import socket
import struct
import time
import uuid
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from strom.common.errors import ErrorCode
from strom.protocol import api, strict
from strom.protocol.records.builder import build_control_batch
from strom.protocol.records.control import ControlType
from strom.protocol.versions import SUPPORTED, ApiKey
from strom.testing import EmbeddedBroker
from tests.broker.raw import RawClient


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(config={"socket.request.max.bytes": 1_000_000}) as b:
        client = RawClient(b.bootstrap)
        client.call(ApiKey.CREATE_TOPICS, 5, {"topics": [
            {"name": "errs", "num_partitions": 1, "replication_factor": 1, "assignments": [],
             "configs": [{"name": "max.message.bytes", "value": "2000"}]}],
            "timeout_ms": 1000, "validate_only": False})
        client.close()
        yield b


def batch(values: list[bytes], magic: int = 2) -> bytearray:
    builder = DefaultRecordBatchBuilder(magic=magic, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    for v in values:
        builder.append(0, timestamp=None, key=None, value=v, headers=[])
    return builder.build()


def produce(client: RawClient, records: bytes, topic: str = "errs", version: int = 9,
            transactional_id: str | None = None) -> int:
    resp = client.call(ApiKey.PRODUCE, version, {
        "transactional_id": transactional_id, "acks": 1, "timeout_ms": 1000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    return int(resp.responses[0].partition_responses[0].error_code)


def end_offset(client: RawClient) -> int:
    resp = client.call(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": "errs", "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                         "timestamp": -1}]}]})
    return int(resp.topics[0].partitions[0].offset)


def test_valid_produce_then_errors_append_nothing(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap)
    assert produce(client, bytes(batch([b"ok"]))) == 0
    before = end_offset(client)

    corrupt = batch([b"hello", b"world"])
    corrupt[-1] ^= 0xFF  # breaks the CRC
    assert produce(client, bytes(corrupt)) == ErrorCode.CORRUPT_MESSAGE  # type: ignore[attr-defined]

    too_big = batch([b"x" * 5000])
    assert produce(client, bytes(too_big)) == ErrorCode.MESSAGE_TOO_LARGE  # type: ignore[attr-defined]

    # Message format v1 in Produce v3+: Kafka's ProduceRequest.validateRecords answers
    # INVALID_RECORD (only magic v2 batches travel in these request versions).
    old = bytes(struct.pack(">qi", 0, 14) + b"\x00" * 4 + b"\x01" + b"\x00" * 9)
    assert produce(client, old) == ErrorCode.INVALID_RECORD  # type: ignore[attr-defined]

    # A good batch followed by a truncated one: the whole partition payload is refused.
    mixed = bytes(batch([b"good"])) + bytes(batch([b"bad"]))[:-3]
    assert produce(client, mixed) == ErrorCode.CORRUPT_MESSAGE  # type: ignore[attr-defined]

    # Produce never auto-creates (only Metadata does, as in Kafka).
    assert produce(client, bytes(batch([b"x"])), topic="no-such-topic") == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)  # type: ignore[attr-defined]
    assert end_offset(client) == before
    client.close()


def test_api_versions_above_max_gets_v0_error_with_ranges(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap)
    client.send_frame(client.header(ApiKey.API_VERSIONS, 99) + b"\x00garbage")
    frame = client.read_frame()
    correlation, error, count = struct.unpack(">ihi", frame[:10])
    assert correlation == client.correlation
    assert error == ErrorCode.UNSUPPORTED_VERSION  # type: ignore[attr-defined]
    ranges = {key: (low, high) for key, low, high in (
        struct.unpack(">hhh", frame[10 + 6 * i: 16 + 6 * i]) for i in range(count))}
    assert ranges[ApiKey.PRODUCE] == (0, SUPPORTED[ApiKey.PRODUCE][1])  # listed as Kafka does
    assert ApiKey.FETCH in ranges
    # The connection stays usable.
    resp = client.call(ApiKey.API_VERSIONS, 3, {"client_software_name": "raw",
                                                "client_software_version": "1"})
    assert resp.error_code == 0
    client.close()


def legacy_message_set(value: bytes) -> bytes:
    """One message of format v1 (magic 1, what Produce v2 carries): offset, size, crc32,
    magic, attributes, timestamp, null key, value."""
    body = struct.pack(">bbq", 1, 0, int(time.time() * 1000)) + struct.pack(">i", -1)
    body += struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


def test_produce_is_listed_from_v0_but_v0_to_v2_close_the_connection(
        broker: EmbeddedBroker) -> None:
    # Kafka 4.1+ lists Produce from v0 (KAFKA-18659: librdkafka before 2.11.1 otherwise stores
    # gzip / snappy / lz4 batches uncompressed) and refuses v0-2 when used: the connection is
    # closed, nothing appended, every other client served.
    client = RawClient(broker.bootstrap)
    listed = client.call(ApiKey.API_VERSIONS, 3, {"client_software_name": "raw",
                                                  "client_software_version": "1"})
    ranges = {k.api_key: (k.min_version, k.max_version) for k in listed.api_keys}
    assert ranges[ApiKey.PRODUCE] == (0, SUPPORTED[ApiKey.PRODUCE][1])
    assert ranges[ApiKey.JOIN_GROUP] == (0, 9)
    before = end_offset(client)
    for version in (0, 1, 2):
        old = RawClient(broker.bootstrap)
        topic = b"errs"
        body = struct.pack(">hii", 1, 1000, 1) + struct.pack(">h", len(topic)) + topic
        records = legacy_message_set(b"old client")
        body += struct.pack(">iii", 1, 0, len(records)) + records
        old.send_frame(old.header(ApiKey.PRODUCE, version) + body)
        with pytest.raises((ConnectionError, socket.timeout)):
            old.read_frame()
        old.close()
    assert end_offset(client) == before
    client.close()


@pytest.mark.parametrize("payload", [
    b"\x00\x01",                                       # shorter than a header
    struct.pack(">hhih", ApiKey.METADATA, 99, 1, 0),   # unsupported version
    struct.pack(">hhih", 999, 0, 1, 0),                # unknown api key
    struct.pack(">hhih", ApiKey.METADATA, 12, 1, 0) + b"\x00\xff\xff\xff",  # malformed body
])
def test_bad_requests_close_only_that_connection(broker: EmbeddedBroker, payload: bytes) -> None:
    bystander = RawClient(broker.bootstrap)
    bad = RawClient(broker.bootstrap)
    bad.send_frame(payload)
    with pytest.raises((ConnectionError, socket.timeout)):
        bad.read_frame()
    bad.close()
    resp = bystander.call(ApiKey.METADATA, 12, {"topics": None,
                                                "allow_auto_topic_creation": False,
                                                "include_topic_authorized_operations": False})
    assert any(t.name == "errs" for t in resp.topics)
    bystander.close()


def test_oversized_frame_closes_connection(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap)
    client.sock.sendall(struct.pack(">i", 50_000_000))
    with pytest.raises((ConnectionError, socket.timeout)):
        client.read_frame()
    client.close()
    other = RawClient(broker.bootstrap)
    assert other.call(ApiKey.API_VERSIONS, 0, {}).error_code == 0
    other.close()


def _null_in(api_key: int, version: int, fields: dict[str, Any]) -> tuple[int, int, bytes]:
    return api_key, version, api.request(api_key, version, fields)  # kafka-python writes nulls


# Found by fuzzing mutated real-client requests: each raised an unhandled exception (logged
# with a traceback), and the Metadata request auto-created a topic named "ab".
FOUND_BY_FUZZING = [
    _null_in(ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": None}),
    _null_in(ApiKey.OFFSET_COMMIT, 2, {"group_id": "g", "generation_id_or_member_epoch": 1,
                                       "member_id": "m", "retention_time_ms": -1,
                                       "topics": None}),
    _null_in(ApiKey.JOIN_GROUP, 5, {"group_id": "g", "session_timeout_ms": 10000,
                                    "rebalance_timeout_ms": 10000, "member_id": "",
                                    "group_instance_id": None, "protocol_type": "consumer",
                                    "protocols": [{"name": "range", "metadata": None}]}),
    (ApiKey.METADATA, 1, struct.pack(">ih", 1, 32767) + b"ab"),  # name runs past the frame
]


@pytest.mark.parametrize(("api_key", "version", "body"), FOUND_BY_FUZZING,
                         ids=["list-offsets", "offset-commit", "join-group", "metadata"])
def test_malformed_bodies_close_the_connection_without_an_error(
    broker: EmbeddedBroker, api_key: int, version: int, body: bytes
) -> None:
    bad = RawClient(broker.bootstrap)
    bad.send_frame(bad.header(api_key, version) + body)
    with pytest.raises((ConnectionError, socket.timeout)):
        bad.read_frame()
    bad.close()
    bystander = RawClient(broker.bootstrap)
    resp = bystander.call(ApiKey.METADATA, 12, {"topics": None,
                                                "allow_auto_topic_creation": False,
                                                "include_topic_authorized_operations": False})
    bystander.close()
    assert "ab" not in {t.name for t in resp.topics}
    time.sleep(0.1)  # the broker's log lines reach the reader thread
    assert not [line for line in broker.output if "Traceback" in line]


@pytest.mark.parametrize("version", [10, 11])
@pytest.mark.parametrize("by_id", [False, True])
def test_metadata_v10_v11_by_topic_id_is_invalid_request(
    broker: EmbeddedBroker, version: int, by_id: bool
) -> None:
    # These versions carry a topic id but cannot look topics up by it, and their response
    # has no null topic name: Kafka answers INVALID_REQUEST per topic, the name as "".
    client = RawClient(broker.bootstrap)
    topics = [{"name": "errs", "topic_id": None},
              {"name": None if not by_id else "errs", "topic_id": uuid.uuid4() if by_id else None}]
    body = api.request(ApiKey.METADATA, version, {"topics": topics,
                                                  "allow_auto_topic_creation": False,
                                                  "include_topic_authorized_operations": False})
    raw = client.call_raw(ApiKey.METADATA, version, body)
    client.close()
    strict.check_response(ApiKey.METADATA, version, raw)
    resp = api.decode_response(ApiKey.METADATA, version, raw)
    assert [(t.name, t.error_code) for t in resp.topics] == [
        ("errs", ErrorCode.INVALID_REQUEST), ("errs" if by_id else "", ErrorCode.INVALID_REQUEST)]  # type: ignore[attr-defined]


def test_clients_cannot_produce_control_batches(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap)
    before = end_offset(client)
    marker = build_control_batch(ControlType.ABORT, producer_id=4242, producer_epoch=0,
                                 coordinator_epoch=0, timestamp=0)
    # A marker is transactional: without a transactional id the request fails first (Kafka's
    # handler checks that before the records); with one, the log refuses the control batch.
    assert produce(client, marker) == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED  # type: ignore[attr-defined]
    assert produce(client, marker, transactional_id="tx") == ErrorCode.INVALID_RECORD  # type: ignore[attr-defined]
    assert end_offset(client) == before
    client.close()


def write_marker(client: RawClient, producer_epoch: int, coordinator_epoch: int) -> int:
    """WriteTxnMarkers v1 (an abort of producer 4343 in errs-0); the partition's error code."""
    resp = client.call(ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [{
        "producer_id": 4343, "producer_epoch": producer_epoch, "transaction_result": False,
        "topics": [{"name": "errs", "partition_indexes": [0]}],
        "coordinator_epoch": coordinator_epoch}]})
    return int(resp.markers[0].topics[0].partitions[0].error_code)


def test_markers_are_fenced_by_producer_and_coordinator_epoch(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap)
    assert write_marker(client, producer_epoch=3, coordinator_epoch=5) == 0
    before = end_offset(client)
    assert write_marker(client, producer_epoch=3, coordinator_epoch=4) == (
        ErrorCode.TRANSACTION_COORDINATOR_FENCED)  # type: ignore[attr-defined]
    assert write_marker(client, producer_epoch=2, coordinator_epoch=5) == (
        ErrorCode.INVALID_PRODUCER_EPOCH)  # type: ignore[attr-defined]
    assert end_offset(client) == before
    assert write_marker(client, producer_epoch=3, coordinator_epoch=6) == 0
    client.close()
