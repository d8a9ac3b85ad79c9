"""The follower's side of Fetch v13, hand-written (sans-io): the request a replica fetcher
sends and the response it reads, records kept as memoryview slices of the response frame.

The broker's side (:mod:`strom.protocol.fast`) decodes requests and encodes responses; this
is the mirror image, for :mod:`strom.broker.replica_fetch`. Going through kafka-python's
generated classes instead built a message object per request from dicts and copied every
partition's records into ``bytes`` on decode (measured in ``docs/benchmarks.md``, "Cluster").

Only v13 is written: the first version naming topics by id (KIP-516: a leader that holds
another topic of the same name — deleted and created again — answers UNKNOWN_TOPIC_ID or
INCONSISTENT_TOPIC_ID instead of serving the wrong generation) and the last with
``replica_id`` in the body (v15 moves it into a tagged ``ReplicaState``). Request layout
(flexible: compact strings / arrays are uvarint N+1, every struct ends with tags)::

    replica_id int32, max_wait_ms int32, min_bytes int32, max_bytes int32,
    isolation_level int8, session_id int32, session_epoch int32,
    topics []: topic_id uuid (16 bytes),
        partitions []: partition int32, current_leader_epoch int32, fetch_offset int64,
                       last_fetched_epoch int32, log_start_offset int64,
                       partition_max_bytes int32, <tags>
        <tags>
    forgotten_topics_data []: topic_id uuid, partitions [] int32, <tags>
    rack_id compact string, <tags>

The response layout is :func:`strom.protocol.fast.encode_fetch_response`'s at v13 (each
topic by its id). Malformed responses raise :class:`~strom.common.errors.InvalidRequestError`
(the Reader's error).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from strom.common.errors import InvalidRequestError
from strom.protocol.fast import FetchRequest
from strom.protocol.primitives import (
    EMPTY_TAGGED_FIELDS,
    Reader,
    write_compact_string,
    write_uuid,
    write_uvarint,
)

FOLLOWER_FETCH_VERSION = 13

_HEAD = struct.Struct(">iiiibii")  # replica_id .. session_epoch
_PARTITION = struct.Struct(">iiqiqi")  # partition .. partition_max_bytes
_RESPONSE_HEAD = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id
_PARTITION_HEAD = struct.Struct(">ihqqq")  # partition .. log_start_offset
_I32 = struct.Struct(">i")
_I32_I64 = struct.Struct(">iq")
_I32_I32 = struct.Struct(">ii")
_ABORTED = struct.Struct(">qq")


def encode_follower_fetch_request(request: FetchRequest) -> bytes:
    """The v13 request body for ``request`` (topics by ``topic_id``, forgotten ones too;
    names are not sent)."""
    out = [_HEAD.pack(request.replica_id, request.max_wait_ms, request.min_bytes,
                      request.max_bytes, request.isolation_level, request.session_id,
                      request.session_epoch),
           write_uvarint(len(request.topics) + 1)]
    append = out.append
    pack = _PARTITION.pack
    for topic in request.topics:
        append(write_uuid(topic.topic_id))
        append(write_uvarint(len(topic.partitions) + 1))
        for p in topic.partitions:
            append(pack(p.partition, p.current_leader_epoch, p.fetch_offset,
                        p.last_fetched_epoch, p.log_start_offset, p.partition_max_bytes))
            append(EMPTY_TAGGED_FIELDS)
        append(EMPTY_TAGGED_FIELDS)
    append(write_uvarint(len(request.forgotten) + 1))
    for _name, topic_id, partitions in request.forgotten:
        append(write_uuid(topic_id))
        append(write_uvarint(len(partitions) + 1))
        out.extend(_I32.pack(p) for p in partitions)
        append(EMPTY_TAGGED_FIELDS)
    append(write_compact_string(request.rack_id))
    append(EMPTY_TAGGED_FIELDS)
    return b"".join(out)


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    """One partition of a decoded Fetch response: ``topic_id`` its topic's id (16 bytes).
    ``records`` is a slice of the response (empty when the broker sent none or null);
    ``diverging_epoch`` (epoch, end offset) and ``current_leader`` (id, epoch) are the
    tagged fields, None when absent."""

    topic_id: bytes
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: tuple[tuple[int, int], ...] | None
    preferred_read_replica: int
    records: memoryview
    diverging_epoch: tuple[int, int] | None = None
    current_leader: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class FollowerFetchResponse:
    throttle_time_ms: int
    error_code: int
    session_id: int
    partitions: tuple[FetchedPartition, ...]


_EMPTY = memoryview(b"")


def decode_follower_fetch_response(body: memoryview) -> FollowerFetchResponse:
    """Decode a v13 Fetch response body (after the response header)."""
    r = Reader(body)
    throttle, error, session = r.unpack(_RESPONSE_HEAD)
    partitions: list[FetchedPartition] = []
    for _ in range(_count(r)):
        topic = r.uuid()
        for _ in range(_count(r)):
            partitions.append(_partition(r, topic))
        r.skip_tagged_fields()
    r.skip_tagged_fields()
    return FollowerFetchResponse(throttle, error, session, tuple(partitions))


def _count(r: Reader) -> int:
    count = r.compact_array_length()
    if count < 0:
        raise InvalidRequestError(f"null array in a Fetch response at byte {r.pos}")
    return count


def _partition(r: Reader, topic: bytes) -> FetchedPartition:
    index, error, high_watermark, last_stable, log_start = r.unpack(_PARTITION_HEAD)
    aborted: tuple[tuple[int, int], ...] | None = None
    count = r.compact_array_length()
    if count >= 0:
        entries = []
        for _ in range(count):
            producer_id, first_offset = r.unpack(_ABORTED)
            entries.append((producer_id, first_offset))
            r.skip_tagged_fields()
        aborted = tuple(entries)
    preferred = r.int32()
    records = r.compact_nullable_bytes()
    diverging = leader = None
    for tag, data in r.tagged_fields():
        if tag == 0:  # EpochEndOffset {epoch int32, end_offset int64, <tags>}
            diverging = _tag(data, _I32_I64)
        elif tag == 1:  # LeaderIdAndEpoch {leader_id int32, leader_epoch int32, <tags>}
            leader = _tag(data, _I32_I32)
    return FetchedPartition(topic, index, error, high_watermark, last_stable, log_start,
                            aborted, preferred, _EMPTY if records is None else records,
                            diverging, leader)


def _tag(data: memoryview, layout: struct.Struct) -> tuple[int, int]:
    first, second = Reader(data).unpack(layout)
    return first, second


__all__ = [
    "FOLLOWER_FETCH_VERSION",
    "FetchedPartition",
    "FollowerFetchResponse",
    "decode_follower_fetch_response",
    "encode_follower_fetch_request",
]
