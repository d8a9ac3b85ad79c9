"""The follower's Fetch v13 codec (topics by id) against kafka-python (the oracle) and
strom's broker side.

Requests: byte-identical to kafka-python's encoding of the same fields, and decoded back by
the broker's own decoder. Responses: what kafka-python encodes and what the broker's encoder
writes decode to the same fields, records coming back as slices of the response body."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import FetchRequest as KFetchRequest

from strom.common.errors import InvalidRequestError
from strom.protocol import api, fast
from strom.protocol.follower_fetch import (
    FOLLOWER_FETCH_VERSION,
    decode_follower_fetch_response,
    encode_follower_fetch_request,
)
from strom.protocol.versions import ApiKey

V = FOLLOWER_FETCH_VERSION
int16s = st.integers(-(2**15), 2**15 - 1)
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
ids = st.binary(min_size=16, max_size=16)

request_partitions = st.lists(st.builds(fast.FetchPartition, int32s, int32s, int64s, int32s,
                                        int64s, int32s), max_size=4)
requests = st.builds(
    fast.FetchRequest, int32s, int32s, int32s, int32s, st.integers(0, 1), int32s, int32s,
    st.lists(st.builds(lambda i, ps: fast.FetchTopic(None, i, ps), ids, request_partitions),
             max_size=3),
    st.lists(st.tuples(st.none(), ids, st.lists(int32s, max_size=3)), max_size=2),
    st.text(max_size=8))


def kafka_request(r: fast.FetchRequest) -> bytes:
    return bytes(KFetchRequest(
        version=V, replica_id=r.replica_id, max_wait_ms=r.max_wait_ms, min_bytes=r.min_bytes,
        max_bytes=r.max_bytes, isolation_level=r.isolation_level, session_id=r.session_id,
        session_epoch=r.session_epoch,
        topics=[KFetchRequest.FetchTopic(version=V, topic_id=_uuid(t.topic_id), partitions=[
            KFetchRequest.FetchTopic.FetchPartition(
                version=V, partition=p.partition, current_leader_epoch=p.current_leader_epoch,
                fetch_offset=p.fetch_offset, last_fetched_epoch=p.last_fetched_epoch,
                log_start_offset=p.log_start_offset, partition_max_bytes=p.partition_max_bytes)
            for p in t.partitions]) for t in r.topics],
        forgotten_topics_data=[KFetchRequest.ForgottenTopic(
            version=V, topic_id=_uuid(topic_id), partitions=ps)
            for _name, topic_id, ps in r.forgotten],
        rack_id=r.rack_id).encode(version=V))


def _uuid(raw: bytes | None) -> uuid.UUID:
    assert raw is not None
    return uuid.UUID(bytes=raw)


@given(request=requests)
@settings(max_examples=150, deadline=None)
def test_request_matches_kafka_python_and_the_broker_decodes_it(
        request: fast.FetchRequest) -> None:
    body = encode_follower_fetch_request(request)
    assert body == kafka_request(request)
    assert fast.decode_fetch_request(memoryview(body), V) == request


results = st.builds(
    fast.FetchPartitionResult, int32s, int16s, int64s, int64s, int64s,
    st.none() | st.lists(st.tuples(int64s, int64s), max_size=2), int32s,
    st.lists(st.binary(max_size=40), max_size=2),
    st.none() | st.tuples(st.integers(0, 2**31 - 1), int64s),
    st.none() | st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1)))
topics = st.lists(st.builds(lambda i, ps: fast.FetchTopicResult("", i, ps), ids,
                            st.lists(results, max_size=3)), max_size=3)


@given(topics=topics, throttle=int32s, error=int16s, session=int32s)
@settings(max_examples=150, deadline=None)
def test_response_from_the_broker_encoder_decodes_to_its_fields(
        topics: list[fast.FetchTopicResult], throttle: int, error: int, session: int) -> None:
    body = memoryview(b"".join(bytes(p) for p in fast.encode_fetch_response(  # type: ignore[arg-type]
        V, topics, throttle_time_ms=throttle, error_code=error, session_id=session)))
    decoded = decode_follower_fetch_response(body)
    assert (decoded.throttle_time_ms, decoded.error_code, decoded.session_id) == (
        throttle, error, session)
    expected = [(t.topic_id, p) for t in topics for p in t.partitions]
    assert len(decoded.partitions) == len(expected)
    for got, (topic_id, want) in zip(decoded.partitions, expected, strict=True):
        assert (got.topic_id, got.partition, got.error_code, got.high_watermark,
                got.last_stable_offset, got.log_start_offset, got.preferred_read_replica) == (
            topic_id, want.partition, want.error_code, want.high_watermark,
            want.last_stable_offset, want.log_start_offset, want.preferred_read_replica)
        aborted = want.aborted_transactions
        assert got.aborted_transactions == (None if aborted is None else tuple(aborted))
        assert bytes(got.records) == b"".join(want.records)  # type: ignore[arg-type]
        assert got.diverging_epoch == want.diverging_epoch
        assert got.current_leader == want.current_leader


T_ID = uuid.UUID(int=7)


def kafka_response(fields: dict[str, Any]) -> memoryview:
    return memoryview(api.response(ApiKey.FETCH, V, fields))


def test_records_are_slices_of_the_response_not_copies() -> None:
    records = bytes(range(61)) * 3
    body = kafka_response({"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                           "responses": [{"topic_id": T_ID, "partitions": [
                               {"partition_index": 2, "error_code": 0, "high_watermark": 9,
                                "last_stable_offset": 9, "log_start_offset": 0,
                                "aborted_transactions": None, "preferred_read_replica": -1,
                                "records": records}]}]})
    [partition] = decode_follower_fetch_response(body).partitions
    assert (partition.topic_id, partition.partition, partition.high_watermark) == (
        T_ID.bytes, 2, 9)
    assert partition.records == records
    assert partition.records.obj is body.obj  # a view into the frame, not a copy


def test_null_records_decode_as_empty() -> None:
    body = kafka_response({"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                           "responses": [{"topic_id": T_ID, "partitions": [
                               {"partition_index": 0, "error_code": 6, "high_watermark": -1,
                                "last_stable_offset": -1, "log_start_offset": -1,
                                "aborted_transactions": None, "preferred_read_replica": -1,
                                "records": None}]}]})
    [partition] = decode_follower_fetch_response(body).partitions
    assert (partition.error_code, bytes(partition.records)) == (6, b"")


def test_a_truncated_response_is_an_error_not_an_index_error() -> None:
    body = bytes(kafka_response({"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                                 "responses": [{"topic_id": T_ID, "partitions": [
                                     {"partition_index": 0, "records": b"x" * 80}]}]}))
    for cut in (3, 12, len(body) - 30):
        with pytest.raises(InvalidRequestError):
            decode_follower_fetch_response(memoryview(body[:cut]))
