"""The hand-written Produce / Fetch codecs against kafka-python (and kio) as oracles.

Requests are encoded by kafka-python (or kio) and decoded by strom; responses are encoded by
strom and decoded by kafka-python (or kio), and compared byte for byte with kafka-python's
own encoding. Golden hex pins one flexible Produce request and one Fetch v12 response.
"""

from __future__ import annotations

import datetime
import io
import itertools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import FetchRequest as KFetchRequest
from kafka.protocol.consumer import FetchResponse as KFetchResponse
from kafka.protocol.producer import ProduceRequest as KProduceRequest
from kafka.protocol.producer import ProduceResponse as KProduceResponse

from strom.common.errors import CorruptMessageError, InvalidRequestError, UnsupportedVersionError
from strom.protocol import fast

PRODUCE_VERSIONS = range(fast.PRODUCE_VERSIONS[0], fast.PRODUCE_VERSIONS[1] + 1)
FETCH_VERSIONS = range(fast.FETCH_VERSIONS[0], fast.FETCH_VERSIONS[1] + 1)

int8s = st.integers(-(2**7), 2**7 - 1)
int16s = st.integers(-(2**15), 2**15 - 1)
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
names = st.text(max_size=12)
uuids = st.binary(min_size=16, max_size=16)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass
class FakeRegion:
    """A stand-in for a file region: the encoder must pass it through untouched."""

    data: bytes
    size: int = -1

    def __post_init__(self) -> None:
        self.size = len(self.data)


def join(parts: Sequence[Any]) -> bytes:
    return b"".join(p.data if isinstance(p, FakeRegion) else bytes(p) for p in parts)


def kuuid(raw: bytes | None) -> uuid.UUID:
    return uuid.UUID(bytes=raw or bytes(16))


def frame_view(data: bytes | bytearray) -> tuple[bytearray, memoryview]:
    """The body as the network layer hands it over: a memoryview over a bytearray."""
    buffer = bytearray(data)
    return buffer, memoryview(buffer)


# ============================================================================================
# Produce request: kafka-python encodes, strom decodes
# ============================================================================================

produce_partitions = st.lists(
    st.tuples(int32s, st.one_of(st.none(), st.binary(max_size=64))), max_size=4
)
produce_topics = st.lists(st.tuples(names, uuids, produce_partitions), max_size=3)


def kafka_produce_request(
    version: int, txn: str | None, acks: int, timeout: int, topics: list[Any]
) -> bytes:
    tpd = KProduceRequest.TopicProduceData
    ppd = tpd.PartitionProduceData
    request = KProduceRequest(
        version=version,
        transactional_id=txn,
        acks=acks,
        timeout_ms=timeout,
        topic_data=[
            tpd(
                name=name,
                topic_id=kuuid(tid),
                partition_data=[ppd(index=i, records=rec) for i, rec in parts],
            )
            for name, tid, parts in topics
        ],
    )
    return bytes(request.encode(version=version))


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@given(
    txn=st.one_of(st.none(), names),
    acks=int16s,
    timeout=int32s,
    topics=produce_topics,
)
@settings(max_examples=40, deadline=None)
def test_produce_request_matches_kafka_python(
    version: int, txn: str | None, acks: int, timeout: int, topics: list[Any]
) -> None:
    buffer, body = frame_view(kafka_produce_request(version, txn, acks, timeout, topics))
    request = fast.decode_produce_request(body, version)
    assert (request.transactional_id, request.acks, request.timeout_ms) == (txn, acks, timeout)
    assert len(request.topics) == len(topics)
    for ours, (name, tid, parts) in zip(request.topics, topics, strict=True):
        if version >= 13:
            assert (ours.name, ours.topic_id) == ("", tid)
        else:
            assert (ours.name, ours.topic_id) == (name, None)
        assert [p.index for p in ours.partitions] == [i for i, _ in parts]
        for p, (_, records) in zip(ours.partitions, parts, strict=True):
            if records is None:
                assert p.records is None
            else:
                assert p.records is not None and bytes(p.records) == records
                assert p.records.obj is buffer  # a slice of the frame, not a copy


def test_produce_records_are_views_of_the_frame() -> None:
    payload = bytes(range(256)) * 64
    data = kafka_produce_request(9, None, -1, 1000, [("t", None, [(0, payload), (1, payload)])])
    buffer, body = frame_view(data)
    request = fast.decode_produce_request(body, 9)
    first = request.topics[0].partitions[0].records
    assert first is not None and first.obj is buffer and not first.readonly
    offset = data.index(payload)
    buffer[offset] = 0xAB  # patching the frame (e.g. the base offset) shows through the view
    assert first[0] == 0xAB
    # the network layer passes the body as a slice after the request header: still the frame
    framed = bytearray(b"HEADER" + data)
    sliced = fast.decode_produce_request(memoryview(framed)[6:], 9).topics[0].partitions[0]
    assert sliced.records is not None and sliced.records.obj is framed
    assert bytes(sliced.records) == payload
    # bytes input works too (read-only views)
    again = fast.decode_produce_request(memoryview(data), 9).topics[0].partitions[1].records
    assert again is not None and again.obj is data


# ============================================================================================
# Produce response: strom encodes, kafka-python decodes (and encodes the same bytes)
# ============================================================================================

record_errors = st.lists(st.tuples(int32s, st.one_of(st.none(), names)), max_size=2)
produce_results = st.lists(
    st.tuples(
        names,
        uuids,
        st.lists(
            st.builds(
                fast.ProducePartitionResult,
                index=int32s,
                error_code=int16s,
                base_offset=int64s,
                log_append_time_ms=int64s,
                log_start_offset=int64s,
                record_errors=record_errors,
                error_message=st.one_of(st.none(), names),
                current_leader=st.one_of(st.none(), st.tuples(int32s, int32s)),
            ),
            max_size=3,
        ),
    ),
    max_size=3,
)
endpoints = st.lists(
    st.builds(fast.NodeEndpoint, int32s, names, int32s, st.one_of(st.none(), names)), max_size=2
)


def kafka_produce_response(
    version: int,
    topics: list[fast.ProduceTopicResult],
    throttle: int,
    nodes: list[fast.NodeEndpoint],
) -> KProduceResponse:
    tr = KProduceResponse.TopicProduceResponse
    pr = tr.PartitionProduceResponse
    return KProduceResponse(
        version=version,
        throttle_time_ms=throttle,
        responses=[
            tr(
                name=t.name,
                topic_id=kuuid(t.topic_id),
                partition_responses=[
                    pr(
                        index=p.index,
                        error_code=p.error_code,
                        base_offset=p.base_offset,
                        log_append_time_ms=p.log_append_time_ms,
                        log_start_offset=p.log_start_offset,
                        record_errors=[
                            pr.BatchIndexAndErrorMessage(
                                batch_index=i, batch_index_error_message=m
                            )
                            for i, m in p.record_errors
                        ],
                        error_message=p.error_message,
                        current_leader=None
                        if p.current_leader in (None, (-1, -1))
                        else pr.LeaderIdAndEpoch(
                            leader_id=p.current_leader[0], leader_epoch=p.current_leader[1]
                        ),
                    )
                    for p in t.partitions
                ],
            )
            for t in topics
        ],
        node_endpoints=[
            KProduceResponse.NodeEndpoint(node_id=n.node_id, host=n.host, port=n.port, rack=n.rack)
            for n in nodes
        ],
    )


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@given(raw=produce_results, throttle=int32s, nodes=endpoints)
@settings(max_examples=40, deadline=None)
def test_produce_response_matches_kafka_python(
    version: int, raw: list[Any], throttle: int, nodes: list[fast.NodeEndpoint]
) -> None:
    topics = [fast.ProduceTopicResult(name, tid, parts) for name, tid, parts in raw]
    data = fast.encode_produce_response(version, topics, throttle, node_endpoints=nodes)
    decoded = KProduceResponse.decode(data, version=version)
    assert decoded.throttle_time_ms == throttle
    assert len(decoded.responses) == len(topics)
    for theirs, ours in zip(decoded.responses, topics, strict=True):
        if version >= 13:
            assert (theirs.topic_id or kuuid(None)) == kuuid(ours.topic_id)  # zero → None
        else:
            assert theirs.name == ours.name
        for tp, op in zip(theirs.partition_responses, ours.partitions, strict=True):
            assert (tp.index, tp.error_code, tp.base_offset, tp.log_append_time_ms) == (
                op.index, op.error_code, op.base_offset, op.log_append_time_ms,
            )
            if version >= 5:
                assert tp.log_start_offset == op.log_start_offset
            if version >= 8:
                assert [(e.batch_index, e.batch_index_error_message) for e in tp.record_errors] == (
                    op.record_errors
                )
                assert tp.error_message == op.error_message
            if version >= 10 and op.current_leader not in (None, (-1, -1)):
                assert (tp.current_leader.leader_id, tp.current_leader.leader_epoch) == (
                    op.current_leader
                )
    if version >= 10 and nodes:
        assert [(n.node_id, n.host, n.port, n.rack) for n in decoded.node_endpoints] == [
            (n.node_id, n.host, n.port, n.rack) for n in nodes
        ]
    # Byte-identical to the oracle's own encoding of the same response.
    reference = kafka_produce_response(version, topics, throttle, nodes if version >= 10 else [])
    assert data == bytes(reference.encode(version=version))


def test_produce_response_without_tags_is_minimal() -> None:
    topics = [fast.ProduceTopicResult("t", None, [fast.ProducePartitionResult(0, base_offset=7)])]
    data = fast.encode_produce_response(9, topics)
    # ... error_message null (00), partition tags (00), topic tags (00), throttle, tags (00)
    assert data.endswith(bytes.fromhex("01" "00" "00" "00" "00000000" "00"))
    with_leader = [
        fast.ProduceTopicResult(
            "t", None, [fast.ProducePartitionResult(0, error_code=6, current_leader=(3, 9))]
        )
    ]
    tagged = fast.encode_produce_response(10, with_leader)
    assert bytes.fromhex("01" "00" "09" "00000003" "00000009" "00") in tagged
    # below v10 the tag does not exist and is dropped
    assert fast.encode_produce_response(9, with_leader) == fast.encode_produce_response(
        9, [fast.ProduceTopicResult("t", None, [fast.ProducePartitionResult(0, error_code=6)])]
    )


# ============================================================================================
# Fetch request: kafka-python encodes, strom decodes
# ============================================================================================

fetch_partitions = st.lists(
    st.tuples(int32s, int32s, int64s, int32s, int64s, int32s, st.one_of(st.none(), uuids)),
    max_size=4,
)
fetch_topics = st.lists(st.tuples(names, uuids, fetch_partitions), max_size=3)
forgotten_topics = st.lists(st.tuples(names, uuids, st.lists(int32s, max_size=4)), max_size=2)


@st.composite
def fetch_requests(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "replica_id": draw(int32s),
        "replica_state": draw(st.one_of(st.none(), st.tuples(int32s, int64s))),
        "cluster_id": draw(st.one_of(st.none(), names)),
        "max_wait_ms": draw(int32s),
        "min_bytes": draw(int32s),
        "max_bytes": draw(int32s),
        "isolation_level": draw(st.sampled_from([0, 1])),
        "session_id": draw(int32s),
        "session_epoch": draw(int32s),
        "topics": draw(fetch_topics),
        "forgotten": draw(forgotten_topics),
        "rack_id": draw(names),
    }


def kafka_fetch_request(version: int, f: dict[str, Any]) -> bytes:
    ft = KFetchRequest.FetchTopic
    fp = ft.FetchPartition
    state = f["replica_state"]
    request = KFetchRequest(
        version=version,
        cluster_id=f["cluster_id"],
        replica_id=f["replica_id"],
        replica_state=None
        if state is None
        else KFetchRequest.ReplicaState(replica_id=state[0], replica_epoch=state[1]),
        max_wait_ms=f["max_wait_ms"],
        min_bytes=f["min_bytes"],
        max_bytes=f["max_bytes"],
        isolation_level=f["isolation_level"],
        session_id=f["session_id"],
        session_epoch=f["session_epoch"],
        topics=[
            ft(
                topic=name,
                topic_id=kuuid(tid),
                partitions=[
                    fp(
                        partition=p[0],
                        current_leader_epoch=p[1],
                        fetch_offset=p[2],
                        last_fetched_epoch=p[3],
                        log_start_offset=p[4],
                        partition_max_bytes=p[5],
                        replica_directory_id=None if p[6] is None else kuuid(p[6]),
                    )
                    for p in parts
                ],
            )
            for name, tid, parts in f["topics"]
        ],
        forgotten_topics_data=[
            KFetchRequest.ForgottenTopic(topic=name, topic_id=kuuid(tid), partitions=ids)
            for name, tid, ids in f["forgotten"]
        ],
        rack_id=f["rack_id"],
    )
    return bytes(request.encode(version=version))


def expected_fetch_request(version: int, f: dict[str, Any]) -> fast.FetchRequest:
    """What strom should decode: fields absent in ``version`` hold the schema defaults."""
    if version >= 15:
        replica_id = -1 if f["replica_state"] is None else f["replica_state"][0]
    else:
        replica_id = f["replica_id"]
    topics = []
    for name, tid, parts in f["topics"]:
        partitions = [
            fast.FetchPartition(
                partition=p[0],
                current_leader_epoch=p[1] if version >= 9 else -1,
                fetch_offset=p[2],
                last_fetched_epoch=p[3] if version >= 12 else -1,
                log_start_offset=p[4] if version >= 5 else -1,
                partition_max_bytes=p[5],
            )
            for p in parts
        ]
        if version >= 13:
            topics.append(fast.FetchTopic(None, tid, partitions))
        else:
            topics.append(fast.FetchTopic(name, None, partitions))
    forgotten: list[tuple[str | None, bytes | None, list[int]]] = []
    if version >= 7:
        forgotten = [
            (None, tid, ids) if version >= 13 else (name, None, ids)
            for name, tid, ids in f["forgotten"]
        ]
    return fast.FetchRequest(
        replica_id=replica_id,
        max_wait_ms=f["max_wait_ms"],
        min_bytes=f["min_bytes"],
        max_bytes=f["max_bytes"],
        isolation_level=f["isolation_level"],
        session_id=f["session_id"] if version >= 7 else 0,
        session_epoch=f["session_epoch"] if version >= 7 else -1,
        topics=topics,
        forgotten=forgotten,
        rack_id=f["rack_id"] if version >= 11 else "",
    )


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@given(f=fetch_requests())
@settings(max_examples=40, deadline=None)
def test_fetch_request_matches_kafka_python(version: int, f: dict[str, Any]) -> None:
    _, body = frame_view(kafka_fetch_request(version, f))
    assert fast.decode_fetch_request(body, version) == expected_fetch_request(version, f)


# ============================================================================================
# Fetch response: strom encodes, kafka-python decodes (and encodes the same bytes)
# ============================================================================================

record_parts = st.lists(
    st.one_of(
        st.binary(min_size=1, max_size=40),
        st.binary(max_size=40).map(lambda data: memoryview(data)),
        st.binary(max_size=200).map(FakeRegion),
    ),
    max_size=4,
)
fetch_results = st.lists(
    st.tuples(
        names,
        uuids,
        st.lists(
            st.builds(
                fast.FetchPartitionResult,
                partition=int32s,
                error_code=int16s,
                high_watermark=int64s,
                last_stable_offset=int64s,
                log_start_offset=int64s,
                aborted_transactions=st.one_of(
                    st.none(), st.lists(st.tuples(int64s, int64s), max_size=3)
                ),
                preferred_read_replica=int32s,
                records=record_parts,
                diverging_epoch=st.one_of(st.none(), st.tuples(int32s, int64s)),
                current_leader=st.one_of(st.none(), st.tuples(int32s, int32s)),
            ),
            max_size=4,
        ),
    ),
    max_size=3,
)


def kafka_fetch_response(
    version: int,
    topics: list[fast.FetchTopicResult],
    throttle: int,
    error_code: int,
    session_id: int,
    nodes: list[fast.NodeEndpoint],
) -> KFetchResponse:
    tr = KFetchResponse.FetchableTopicResponse
    pd = tr.PartitionData

    def records(parts: Sequence[fast.ResponsePart]) -> bytes:
        return join(parts)

    return KFetchResponse(
        version=version,
        throttle_time_ms=throttle,
        error_code=error_code,
        session_id=session_id,
        responses=[
            tr(
                topic=t.name,
                topic_id=kuuid(t.topic_id),
                partitions=[
                    pd(
                        partition_index=p.partition,
                        error_code=p.error_code,
                        high_watermark=p.high_watermark,
                        last_stable_offset=p.last_stable_offset,
                        log_start_offset=p.log_start_offset,
                        diverging_epoch=None
                        if p.diverging_epoch in (None, (-1, -1))
                        else pd.EpochEndOffset(
                            epoch=p.diverging_epoch[0], end_offset=p.diverging_epoch[1]
                        ),
                        current_leader=None
                        if p.current_leader in (None, (-1, -1))
                        else pd.LeaderIdAndEpoch(
                            leader_id=p.current_leader[0], leader_epoch=p.current_leader[1]
                        ),
                        aborted_transactions=None
                        if p.aborted_transactions is None
                        else [
                            pd.AbortedTransaction(producer_id=pid, first_offset=first)
                            for pid, first in p.aborted_transactions
                        ],
                        preferred_read_replica=p.preferred_read_replica,
                        records=records(p.records),
                    )
                    for p in t.partitions
                ],
            )
            for t in topics
        ],
        node_endpoints=[
            KFetchResponse.NodeEndpoint(node_id=n.node_id, host=n.host, port=n.port, rack=n.rack)
            for n in nodes
        ],
    )


def check_parts_shape(parts: list[Any], topics: list[fast.FetchTopicResult]) -> None:
    """Regions pass through by identity and in order; byte pieces are coalesced bytes."""
    regions = [
        part
        for t in topics
        for p in t.partitions
        for part in p.records or []
        if isinstance(part, FakeRegion)
    ]
    assert [id(x) for x in parts if isinstance(x, FakeRegion)] == [id(x) for x in regions]
    for a, b in itertools.pairwise(parts):
        assert isinstance(a, FakeRegion) or isinstance(b, FakeRegion), "adjacent bytes pieces"
    for part in parts:
        assert isinstance(part, FakeRegion | bytes)


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@given(
    raw=fetch_results,
    throttle=int32s,
    error_code=int16s,
    session_id=int32s,
    nodes=endpoints,
)
@settings(max_examples=40, deadline=None)
def test_fetch_response_matches_kafka_python(
    version: int,
    raw: list[Any],
    throttle: int,
    error_code: int,
    session_id: int,
    nodes: list[fast.NodeEndpoint],
) -> None:
    topics = [fast.FetchTopicResult(name, tid, parts) for name, tid, parts in raw]
    parts = fast.encode_fetch_response(
        version,
        topics,
        throttle_time_ms=throttle,
        error_code=error_code,
        session_id=session_id,
        node_endpoints=nodes,
    )
    check_parts_shape(parts, topics)
    data = join(parts)
    decoded = KFetchResponse.decode(data, version=version)
    assert decoded.throttle_time_ms == throttle
    if version >= 7:
        assert (decoded.error_code, decoded.session_id) == (error_code, session_id)
    assert len(decoded.responses) == len(topics)
    for theirs, ours in zip(decoded.responses, topics, strict=True):
        if version >= 13:
            assert (theirs.topic_id or kuuid(None)) == kuuid(ours.topic_id)  # zero → None
        else:
            assert theirs.topic == ours.name
        for tp, op in zip(theirs.partitions, ours.partitions, strict=True):
            assert (tp.partition_index, tp.error_code, tp.high_watermark) == (
                op.partition, op.error_code, op.high_watermark,
            )
            assert tp.last_stable_offset == op.last_stable_offset
            if version >= 5:
                assert tp.log_start_offset == op.log_start_offset
            if op.aborted_transactions is None:
                assert tp.aborted_transactions is None
            else:
                assert [(a.producer_id, a.first_offset) for a in tp.aborted_transactions] == (
                    op.aborted_transactions
                )
            if version >= 11:
                assert tp.preferred_read_replica == op.preferred_read_replica
            assert tp.records is not None and bytes(tp.records) == join(op.records)
            if version >= 12 and op.diverging_epoch not in (None, (-1, -1)):
                assert (tp.diverging_epoch.epoch, tp.diverging_epoch.end_offset) == (
                    op.diverging_epoch
                )
            if version >= 12 and op.current_leader not in (None, (-1, -1)):
                assert (tp.current_leader.leader_id, tp.current_leader.leader_epoch) == (
                    op.current_leader
                )
    if version >= 16 and nodes:
        assert [(n.node_id, n.host, n.port, n.rack) for n in decoded.node_endpoints] == [
            (n.node_id, n.host, n.port, n.rack) for n in nodes
        ]
    reference = kafka_fetch_response(
        version, topics, throttle, error_code, session_id, nodes if version >= 16 else []
    )
    assert data == bytes(reference.encode(version=version))


def test_fetch_response_regions_pass_through_untouched() -> None:
    region_a = FakeRegion(b"A" * 100)
    region_b = FakeRegion(b"B" * 50)
    topics = [
        fast.FetchTopicResult(
            "t",
            None,
            [
                fast.FetchPartitionResult(0, records=[region_a, b"tail", region_b]),
                fast.FetchPartitionResult(1, records=[memoryview(b"mv")]),
                fast.FetchPartitionResult(2, records=[]),
                fast.FetchPartitionResult(3, error_code=1),
            ],
        )
    ]
    parts = fast.encode_fetch_response(12, topics)
    assert len(parts) == 5
    assert parts[1] is region_a and parts[3] is region_b
    assert isinstance(parts[0], bytes)
    assert parts[0].endswith(bytes.fromhex("9b01"))  # records length: uvarint(154 + 1)
    assert parts[2] == b"tail"
    assert parts[0].startswith(bytes(10))  # throttle 0, error 0, session 0
    old = fast.encode_fetch_response(11, topics)
    assert isinstance(old[0], bytes) and old[0].endswith((154).to_bytes(4, "big"))
    assert old[1] is region_a and old[3] is region_b


def test_fetch_response_tags_only_when_set() -> None:
    def partition_tail(p: fast.FetchPartitionResult) -> bytes:
        return join(fast.encode_fetch_response(12, [fast.FetchTopicResult("t", None, [p])]))

    plain = partition_tail(fast.FetchPartitionResult(0, records=[]))
    assert plain.endswith(b"\x01" + b"\x00" + b"\x00" + b"\x00")  # records, 3 empty tag sections
    assert partition_tail(
        fast.FetchPartitionResult(0, records=[], diverging_epoch=(-1, -1), current_leader=(-1, -1))
    ) == plain  # equal to the defaults: not written, as in Kafka
    tagged = partition_tail(fast.FetchPartitionResult(0, records=[], current_leader=(2, 5)))
    current_leader = bytes.fromhex("01" "01" "09" "00000002" "00000005" "00")  # 1 tag: 1, 9 B
    assert tagged.endswith(b"\x01" + current_leader + b"\x00\x00")


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_error_partition_has_empty_records(version: int) -> None:
    # librdkafka rejects a whole response whose records are null ("invalid MessageSetSize
    # -1"), so an error partition carries zero-length records, as Kafka's broker sends.
    error = fast.FetchPartitionResult(0, error_code=1)  # OFFSET_OUT_OF_RANGE, nothing else set
    data = join(fast.encode_fetch_response(version, [fast.FetchTopicResult("t", None, [error])]))
    decoded = KFetchResponse.decode(data, version=version).responses[0].partitions[0]
    assert decoded.error_code == 1
    assert decoded.records is not None and bytes(decoded.records) == b""
    assert decoded.aborted_transactions is None


def test_fetch_session_error_response() -> None:
    parts = fast.encode_fetch_response(12, [], error_code=70, session_id=0)
    assert parts == [bytes.fromhex("00000000" "0046" "00000000" "01" "00")]
    decoded = KFetchResponse.decode(parts[0], version=12)
    assert (decoded.error_code, decoded.responses) == (70, [])


# ============================================================================================
# Golden bytes
# ============================================================================================

# Produce v9 (flexible): transactional_id "tx", acks -1, timeout 30000, topic "events" with
# partition 0 = 3 opaque record bytes and partition 1 = null records.
GOLDEN_PRODUCE_V9 = (
    "03" "7478"  # transactional_id: compact string, length 2+1
    "ffff"  # acks -1
    "00007530"  # timeout_ms 30000
    "02"  # topics: 1 (+1)
    "07" "6576656e7473"  # "events"
    "03"  # partitions: 2 (+1)
    "00000000" "04" "010203" "00"  # index 0, records (3+1) bytes, tags
    "00000001" "00" "00"  # index 1, null records, tags
    "00"  # topic tags
    "00"  # request tags
)

# Fetch v12: throttle 5, error 0, session 77; topic "t", partition 2 with hw 10, lso 9,
# log start 1, one aborted txn (pid 42 at offset 3), no preferred replica, records from a
# region of 4 bytes, diverging epoch (7, 100).
GOLDEN_FETCH_V12 = (
    "00000005" "0000" "0000004d"  # throttle_time_ms, error_code, session_id
    "02" "0274"  # responses: 1 (+1), topic "t"
    "02"  # partitions: 1 (+1)
    "00000002" "0000"  # partition_index, error_code
    "000000000000000a" "0000000000000009" "0000000000000001"  # hw, lso, log_start
    "02" "000000000000002a" "0000000000000003" "00"  # aborted: 1 (+1), pid, first, tags
    "ffffffff"  # preferred_read_replica
    "05" "cafebabe"  # records: 4 (+1), bytes
    "01" "00" "0d" "00000007" "0000000000000064" "00"  # tags: diverging_epoch (tag 0, 13 B)
    "00"  # topic tags
    "00"  # response tags
)


def test_golden_produce_request_v9() -> None:
    data = bytes.fromhex(GOLDEN_PRODUCE_V9)
    # the oracle agrees with the pinned bytes ...
    topics = [("events", None, [(0, b"\x01\x02\x03"), (1, None)])]
    assert kafka_produce_request(9, "tx", -1, 30000, topics) == data
    # ... and so does strom
    request = fast.decode_produce_request(memoryview(data), 9)
    assert (request.transactional_id, request.acks, request.timeout_ms) == ("tx", -1, 30000)
    (topic,) = request.topics
    assert topic.name == "events" and topic.topic_id is None
    p0, p1 = topic.partitions
    assert p0.index == 0 and p0.records is not None and bytes(p0.records) == b"\x01\x02\x03"
    assert p1.index == 1 and p1.records is None


def test_golden_fetch_response_v12() -> None:
    region = FakeRegion(bytes.fromhex("cafebabe"))
    topics = [
        fast.FetchTopicResult(
            "t",
            None,
            [
                fast.FetchPartitionResult(
                    2, 0, 10, 9, 1, [(42, 3)], -1, [region], diverging_epoch=(7, 100)
                )
            ],
        )
    ]
    parts = fast.encode_fetch_response(12, topics, throttle_time_ms=5, session_id=77)
    assert parts[1] is region and len(parts) == 3
    assert join(parts) == bytes.fromhex(GOLDEN_FETCH_V12)
    decoded = KFetchResponse.decode(bytes.fromhex(GOLDEN_FETCH_V12), version=12)
    p = decoded.responses[0].partitions[0]
    assert (p.diverging_epoch.epoch, p.diverging_epoch.end_offset, p.records) == (
        7, 100, bytes.fromhex("cafebabe"),
    )


# ============================================================================================
# kio as a second oracle
# ============================================================================================

kio_serial = pytest.importorskip("kio.serial")


def kio_encode(entity: Any) -> bytes:
    buffer = io.BytesIO()
    kio_serial.entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def kio_decode(entity_type: type, data: bytes) -> Any:
    value, size = kio_serial.entity_reader(entity_type)(data, 0)
    assert size == len(data)
    return value


def test_kio_produce_request_v9_and_v13() -> None:
    from kio.schema.produce.v9 import request as v9
    from kio.schema.produce.v13 import request as v13
    from kio.schema.types import TopicName, TransactionalId
    from kio.static.primitive import Records, i16, i32, i32Timedelta

    timeout = i32Timedelta.parse(datetime.timedelta(seconds=5))
    entity9 = v9.ProduceRequest(
        transactional_id=TransactionalId("tx"),
        acks=i16(1),
        timeout=timeout,
        topic_data=(
            v9.TopicProduceData(
                name=TopicName("events"),
                partition_data=(
                    v9.PartitionProduceData(index=i32(3), records=Records(b"batch")),
                ),
            ),
        ),
    )
    data = kio_encode(entity9)
    request = fast.decode_produce_request(memoryview(data), 9)
    assert (request.transactional_id, request.acks, request.timeout_ms) == ("tx", 1, 5000)
    assert request.topics[0].name == "events"
    records = request.topics[0].partitions[0].records
    assert request.topics[0].partitions[0].index == 3
    assert records is not None and bytes(records) == b"batch"

    topic_id = uuid.UUID(int=0x1234)
    entity13 = v13.ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=timeout,
        topic_data=(
            v13.TopicProduceData(
                topic_id=topic_id,
                partition_data=(v13.PartitionProduceData(index=i32(0), records=None),),
            ),
        ),
    )
    request = fast.decode_produce_request(memoryview(kio_encode(entity13)), 13)
    assert request.topics[0].topic_id == topic_id.bytes
    assert request.topics[0].partitions[0].records is None


def test_kio_fetch_request_v15_replica_state() -> None:
    from kio.schema.fetch.v15 import request as v15
    from kio.schema.types import BrokerId
    from kio.static.primitive import i8, i32, i32Timedelta, i64

    topic_id = uuid.UUID(int=99)
    entity = v15.FetchRequest(
        replica_state=v15.ReplicaState(replica_id=BrokerId(4), replica_epoch=i64(12)),
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=500)),
        min_bytes=i32(1),
        max_bytes=i32(1 << 20),
        isolation_level=i8(1),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=(
            v15.FetchTopic(
                topic_id=topic_id,
                partitions=(
                    v15.FetchPartition(
                        partition=i32(2),
                        current_leader_epoch=i32(3),
                        fetch_offset=i64(100),
                        last_fetched_epoch=i32(2),
                        log_start_offset=i64(0),
                        partition_max_bytes=i32(65536),
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="rack-a",
    )
    request = fast.decode_fetch_request(memoryview(kio_encode(entity)), 15)
    assert request.replica_id == 4
    assert (request.max_wait_ms, request.min_bytes, request.max_bytes) == (500, 1, 1 << 20)
    assert request.isolation_level == 1 and request.rack_id == "rack-a"
    assert request.topics == [
        fast.FetchTopic(None, topic_id.bytes, [fast.FetchPartition(2, 3, 100, 2, 0, 65536)])
    ]


def test_kio_decodes_strom_responses() -> None:
    from kio.schema.fetch.v12 import response as fetch_v12
    from kio.schema.fetch.v13 import response as fetch_v13
    from kio.schema.produce.v9 import response as produce_v9

    response = kio_decode(fetch_v12.FetchResponse, bytes.fromhex(GOLDEN_FETCH_V12))
    assert response.session_id == 77
    (partition,) = response.responses[0].partitions
    assert partition.high_watermark == 10 and partition.records == bytes.fromhex("cafebabe")
    assert partition.diverging_epoch.epoch == 7 and partition.diverging_epoch.end_offset == 100
    assert [(a.producer_id, a.first_offset) for a in partition.aborted_transactions] == [(42, 3)]

    topic_id = uuid.UUID(int=7)
    parts = fast.encode_fetch_response(
        13,
        [
            fast.FetchTopicResult(
                None,
                topic_id.bytes,
                [fast.FetchPartitionResult(0, 0, 5, 5, 0, records=[FakeRegion(b"xyz")])],
            )
        ],
    )
    response = kio_decode(fetch_v13.FetchResponse, join(parts))
    assert response.responses[0].topic_id == topic_id
    assert response.responses[0].partitions[0].records == b"xyz"

    data = fast.encode_produce_response(
        9,
        [
            fast.ProduceTopicResult(
                "events",
                None,
                [fast.ProducePartitionResult(0, 0, 41, -1, 0, [(1, "bad")], "oops")],
            )
        ],
        throttle_time_ms=3,
    )
    response = kio_decode(produce_v9.ProduceResponse, data)
    (partition,) = response.responses[0].partition_responses
    assert (partition.base_offset, partition.error_message) == (41, "oops")
    assert [(e.batch_index, e.batch_index_error_message) for e in partition.record_errors] == [
        (1, "bad")
    ]


# ============================================================================================
# Robustness: random and mutated bodies raise only the protocol errors
# ============================================================================================

EXPECTED_ERRORS = (InvalidRequestError, CorruptMessageError)


def seed_bodies() -> list[tuple[str, int, bytes]]:
    seeds: list[tuple[str, int, bytes]] = []
    topics = [("topic-a", bytes(range(16)), [(0, b"x" * 20), (1, None)]), ("b", bytes(16), [])]
    for version in PRODUCE_VERSIONS:
        seeds.append(("produce", version, kafka_produce_request(version, "t", -1, 100, topics)))
    sample = {
        "replica_id": -1,
        "replica_state": (1, 2),
        "cluster_id": "c",
        "max_wait_ms": 500,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 1,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [("topic-a", bytes(range(16)), [(0, -1, 5, -1, 0, 1 << 20, bytes(16))])],
        "forgotten": [("old", bytes(16), [1, 2])],
        "rack_id": "r",
    }
    for version in FETCH_VERSIONS:
        seeds.append(("fetch", version, kafka_fetch_request(version, sample)))
    return seeds


SEEDS = seed_bodies()


def decode(kind: str, version: int, data: bytes) -> None:
    body = memoryview(bytearray(data))
    try:
        if kind == "produce":
            fast.decode_produce_request(body, version)
        else:
            fast.decode_fetch_request(body, version)
    except EXPECTED_ERRORS:
        pass


def test_seed_bodies_decode() -> None:
    for kind, version, data in SEEDS:
        if kind == "produce":
            assert fast.decode_produce_request(memoryview(data), version).topics[0].name in (
                "topic-a", "",
            )
        else:
            assert len(fast.decode_fetch_request(memoryview(data), version).topics) == 1


@FUZZ
@given(
    kind=st.sampled_from(["produce", "fetch"]),
    version=st.integers(4, 13),
    data=st.binary(max_size=200),
)
def test_random_bodies(kind: str, version: int, data: bytes) -> None:
    decode(kind, version, data)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, int, bytes]:
    kind, version, data = draw(st.sampled_from(SEEDS))
    buffer = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete"]))
        if not buffer:
            break
        at = draw(st.integers(0, len(buffer) - 1))
        if action == "flip":
            buffer[at] ^= 1 << draw(st.integers(0, 7))
        elif action == "set":
            buffer[at] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
        elif action == "truncate":
            del buffer[at:]
        elif action == "insert":
            buffer[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:
            del buffer[at : at + draw(st.integers(1, 8))]
    return kind, version, bytes(buffer)


@FUZZ
@given(case=mutated())
def test_mutated_bodies(case: tuple[str, int, bytes]) -> None:
    decode(*case)


def test_every_prefix_of_a_valid_body_is_rejected_cleanly() -> None:
    for kind, version, data in SEEDS:
        for end in range(len(data)):
            decode(kind, version, data[:end])


def test_hostile_array_counts_fail_fast() -> None:
    # 2**31-1 topics claimed in a 12-byte body: rejected before any loop runs.
    body = bytes.fromhex("ffff" "0001" "00000064" "7fffffff")
    with pytest.raises(InvalidRequestError):
        fast.decode_produce_request(memoryview(body), 3)
    with pytest.raises(InvalidRequestError):
        fast.decode_fetch_request(memoryview(bytes.fromhex("ff" * 17) + b"\xff\xff\xff\x7f"), 12)


def test_unsupported_versions() -> None:
    with pytest.raises(UnsupportedVersionError):
        fast.decode_produce_request(memoryview(b""), 2)
    with pytest.raises(UnsupportedVersionError):
        fast.decode_fetch_request(memoryview(b""), 19)
    with pytest.raises(UnsupportedVersionError):
        fast.encode_produce_response(14, [])
    with pytest.raises(UnsupportedVersionError):
        fast.encode_fetch_response(3, [])
