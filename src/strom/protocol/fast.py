"""Hand-written Produce (0) and Fetch (1) codecs for the data path (sans-io, no copies).

Every other API goes through kafka-python's schema-driven classes (:mod:`strom.protocol.api`);
these two run for every produced batch and every fetch, so they are written out by hand
(DESIGN.md, "Protocol codec"):

* :func:`decode_produce_request` returns record sets as memoryview slices of the request
  frame — never copied, so the log can patch base offsets in place and append the same bytes.
* :func:`encode_fetch_response` returns the body as a list of parts: adjacent byte pieces
  joined into one ``bytes``, each :class:`Region` (a file range the network layer sends with
  ``sendfile``) passed through untouched, in order. The record length prefix is computed from
  the parts' sizes (``len()`` for buffers, ``.size`` for regions).

Versions: Produce 3-13 (flexible from 9, topic ids instead of names in 13), Fetch 4-17
(flexible from 12, topic ids from 13, replica id in a tagged ``ReplicaState`` from 15).
Flexible versions use compact strings / arrays / bytes (uvarint N+1 lengths) and end every
struct with a tagged-field section. Encoders write a tagged field only when its value differs
from the schema default (old librdkafka misparses others), so a struct without any is a
single ``0`` byte. Decoders skip tags they do not need, as Kafka does, and tolerate trailing
bytes after the body (Kafka does not check for them either).

Malformed input raises :class:`~strom.common.errors.InvalidRequestError`; an unsupported
version raises :class:`~strom.common.errors.UnsupportedVersionError`. Record bytes are
opaque here: batch validation belongs to :mod:`strom.protocol.records`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from strom.common.errors import InvalidRequestError, UnsupportedVersionError
from strom.protocol.primitives import (
    EMPTY_TAGGED_FIELDS,
    INT32,
    ZERO_UUID,
    Reader,
    read_uvarint,
    write_compact_nullable_string,
    write_compact_string,
    write_nullable_string,
    write_string,
    write_tagged_fields,
    write_uvarint,
)

PRODUCE_VERSIONS = (3, 13)
FETCH_VERSIONS = (4, 18)

_PRODUCE_FLEXIBLE = 9
_PRODUCE_TOPIC_IDS = 13
_FETCH_FLEXIBLE = 12
_FETCH_TOPIC_IDS = 13
_FETCH_REPLICA_STATE = 15


_I16_I32 = struct.Struct(">hi")
_I32_I32 = struct.Struct(">ii")
_I32_I64 = struct.Struct(">iq")
_I64_I64 = struct.Struct(">qq")
_I32_I16_I32 = struct.Struct(">ihi")
_UNSET_PAIR = (-1, -1)  # default of the LeaderIdAndEpoch / EpochEndOffset tagged structs
# Fixed head of a Fetch request: [replica_id,] max_wait_ms, min_bytes, max_bytes,
# isolation_level[, session_id, session_epoch]
_FETCH_HEAD_V4 = struct.Struct(">iiiib")
_FETCH_HEAD_V7 = struct.Struct(">iiiibii")
_FETCH_HEAD_V15 = struct.Struct(">iiibii")


def _check_version(api: str, version: int, supported: tuple[int, int]) -> None:
    if not supported[0] <= version <= supported[1]:
        raise UnsupportedVersionError(
            f"{api} v{version} is outside the supported range v{supported[0]}-v{supported[1]}"
        )


def _non_null(count: int, what: str) -> int:
    if count < 0:
        raise InvalidRequestError(f"{what} array is null")
    return count


# ============================================================================================
# Produce
# ============================================================================================


@dataclass(slots=True)
class ProducePartition:
    """One partition's record set: a slice of the request frame (None if sent as null)."""

    index: int
    records: memoryview | None


@dataclass(slots=True)
class ProduceTopic:
    """Topic by name (v3-12; ``topic_id`` None) or by id (v13; ``name`` is "")."""

    name: str
    topic_id: bytes | None
    partitions: list[ProducePartition]


@dataclass(slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: list[ProduceTopic]


# The per-partition loops below keep the position in a local and slice the frame directly:
# they run once per produced batch, and Reader method calls would cost more than the work.


def _produce_partitions(r: Reader, count: int) -> list[ProducePartition]:
    """v3-8 partitions: ``index int32, records nullable bytes (int32 length)``."""
    buf = r.buf
    size = r.size
    pos = r.pos
    partitions: list[ProducePartition] = []
    append = partitions.append
    unpack = _I32_I32.unpack_from
    records: memoryview | None
    try:
        for _ in range(count):
            index, length = unpack(buf, pos)
            pos += 8
            if length < 0:
                if length != -1:
                    raise InvalidRequestError(f"negative records length {length} at {pos - 4}")
                records = None
            else:
                end = pos + length
                if end > size:
                    raise InvalidRequestError(f"records of {length} bytes at {pos} truncated")
                records = buf[pos:end]
                pos = end
            append(ProducePartition(index, records))
    except struct.error:
        raise InvalidRequestError(f"truncated produce partition at byte {pos}") from None
    r.pos = pos
    return partitions


def _flexible_produce_partitions(r: Reader, count: int) -> list[ProducePartition]:
    """v9+ partitions: ``index int32, records compact nullable bytes, <tags>``."""
    buf = r.buf
    size = r.size
    pos = r.pos
    partitions: list[ProducePartition] = []
    append = partitions.append
    unpack = INT32.unpack_from
    records: memoryview | None
    try:
        for _ in range(count):
            (index,) = unpack(buf, pos)
            pos += 4
            # records length: uvarint(N+1), inlined for the 1-3 byte forms (N < 2 MiB)
            b0 = buf[pos]
            if b0 < 0x80:
                length = b0
                pos += 1
            else:
                b1 = buf[pos + 1]
                if b1 < 0x80:
                    length = (b0 & 0x7F) | (b1 << 7)
                    pos += 2
                else:
                    b2 = buf[pos + 2]
                    if b2 < 0x80:
                        length = (b0 & 0x7F) | ((b1 & 0x7F) << 7) | (b2 << 14)
                        pos += 3
                    else:
                        length, pos = read_uvarint(buf, pos)
            if length == 0:
                records = None
            else:
                end = pos + length - 1
                if end > size:
                    raise InvalidRequestError(f"records of {length - 1} bytes at {pos} truncated")
                records = buf[pos:end]
                pos = end
            append(ProducePartition(index, records))
            if buf[pos] == 0:  # no tagged fields: the usual case
                pos += 1
            else:
                r.pos = pos
                r.skip_tagged_fields()
                pos = r.pos
    except (struct.error, IndexError):
        raise InvalidRequestError(f"truncated produce partition at byte {pos}") from None
    r.pos = pos
    return partitions


def decode_produce_request(body: memoryview, version: int) -> ProduceRequest:
    """Decode a Produce request body (the bytes after the request header).

    Wire layout (``[]`` = array, int32 count in v3-8, uvarint N+1 in v9+)::

        transactional_id  nullable string        (compact in v9+)
        acks              int16
        timeout_ms        int32
        topics []:
            name          string      v3-12      (compact in v9+)
            topic_id      uuid        v13+
            partitions []:
                index     int32
                records   nullable bytes         (compact in v9+; returned as a slice)
                <tags>                v9+
            <tags>                    v9+
        <tags>                        v9+
    """
    _check_version("Produce", version, PRODUCE_VERSIONS)
    r = Reader(body)
    topics: list[ProduceTopic] = []
    if version >= _PRODUCE_FLEXIBLE:
        transactional_id = r.compact_nullable_string()
        acks, timeout_ms = r.unpack(_I16_I32)
        by_id = version >= _PRODUCE_TOPIC_IDS
        for _ in range(_non_null(r.compact_array_length(), "topics")):
            if by_id:
                name, topic_id = "", r.uuid()
            else:
                name, topic_id = r.compact_string(), None
            count = _non_null(r.compact_array_length(), "partitions")
            partitions = _flexible_produce_partitions(r, count)
            r.skip_tagged_fields()
            topics.append(ProduceTopic(name, topic_id, partitions))
        r.skip_tagged_fields()
    else:
        transactional_id = r.nullable_string()
        acks, timeout_ms = r.unpack(_I16_I32)
        for _ in range(_non_null(r.array_length(), "topics")):
            name = r.string()
            count = _non_null(r.array_length(), "partitions")
            topics.append(ProduceTopic(name, None, _produce_partitions(r, count)))
    return ProduceRequest(transactional_id, acks, timeout_ms, topics)


@dataclass(slots=True)
class ProducePartitionResult:
    """One partition's outcome. ``current_leader`` (leader id, leader epoch) is sent, v10+,
    only when set (KIP-951: with NOT_LEADER_OR_FOLLOWER)."""

    index: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    record_errors: list[tuple[int, str | None]] = field(default_factory=list)
    error_message: str | None = None
    current_leader: tuple[int, int] | None = None


@dataclass(slots=True)
class ProduceTopicResult:
    name: str
    topic_id: bytes | None
    partitions: list[ProducePartitionResult]


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    """A broker address sent with current-leader hints (Produce v10+, Fetch v16+; KIP-951)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


_PRODUCE_PARTITION_V3 = struct.Struct(">ihqq")  # index, error, base_offset, log_append_time
_PRODUCE_PARTITION_V5 = struct.Struct(">ihqqq")  # ... + log_start_offset


def _node_endpoints_tag(endpoints: Sequence[NodeEndpoint]) -> bytes:
    """NodeEndpoints as a tag-0 section: compact [node_id, host, port, rack, <tags>]."""
    items = [
        INT32.pack(e.node_id)
        + write_compact_string(e.host)
        + INT32.pack(e.port)
        + write_compact_nullable_string(e.rack)
        + EMPTY_TAGGED_FIELDS
        for e in endpoints
    ]
    return write_tagged_fields({0: write_uvarint(len(items) + 1) + b"".join(items)})


def _leader_tag(tag: int, leader: tuple[int, int]) -> tuple[int, bytes]:
    """LeaderIdAndEpoch struct (leader_id int32, leader_epoch int32, <tags>) as a tag."""
    return tag, _I32_I32.pack(leader[0], leader[1]) + EMPTY_TAGGED_FIELDS


def encode_produce_response(
    version: int,
    topics: list[ProduceTopicResult],
    throttle_time_ms: int = 0,
    *,
    node_endpoints: Sequence[NodeEndpoint] | None = None,
) -> bytes:
    """Encode a Produce response body (no response header).

    Wire layout (``[]`` = array, int32 count in v3-8, uvarint N+1 in v9+)::

        responses []:
            name                string    v3-12   (compact in v9+)
            topic_id            uuid      v13+
            partitions []:
                index               int32
                error_code          int16
                base_offset         int64
                log_append_time_ms  int64
                log_start_offset    int64       v5+
                record_errors []:               v8+
                    batch_index             int32
                    batch_index_error_msg   nullable string (compact in v9+)
                    <tags>                  v9+
                error_message       nullable string  v8+ (compact in v9+)
                <tags>              v9+: 0 = current_leader (v10+, only when set)
            <tags>                  v9+
        throttle_time_ms    int32
        <tags>              v9+: 0 = node_endpoints (v10+, only when non-empty)
    """
    _check_version("Produce", version, PRODUCE_VERSIONS)
    flexible = version >= _PRODUCE_FLEXIBLE
    head = _PRODUCE_PARTITION_V5 if version >= 5 else _PRODUCE_PARTITION_V3
    out: list[bytes] = []
    append = out.append
    append(write_uvarint(len(topics) + 1) if flexible else INT32.pack(len(topics)))
    for topic in topics:
        if version >= _PRODUCE_TOPIC_IDS:
            append(topic.topic_id or ZERO_UUID)
        elif flexible:
            append(write_compact_string(topic.name))
        else:
            append(write_string(topic.name))
        partitions = topic.partitions
        append(write_uvarint(len(partitions) + 1) if flexible else INT32.pack(len(partitions)))
        for p in partitions:
            if version >= 5:
                append(
                    head.pack(
                        p.index,
                        p.error_code,
                        p.base_offset,
                        p.log_append_time_ms,
                        p.log_start_offset,
                    )
                )
            else:
                append(head.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms))
            if version < 8:
                continue
            errors = p.record_errors
            if flexible:
                append(write_uvarint(len(errors) + 1))
                for batch_index, message in errors:
                    append(INT32.pack(batch_index))
                    append(write_compact_nullable_string(message))
                    append(EMPTY_TAGGED_FIELDS)
                append(write_compact_nullable_string(p.error_message))
                if (
                    p.current_leader is not None
                    and p.current_leader != _UNSET_PAIR
                    and version >= 10
                ):
                    append(write_tagged_fields([_leader_tag(0, p.current_leader)]))
                else:
                    append(EMPTY_TAGGED_FIELDS)
            else:
                append(INT32.pack(len(errors)))
                for batch_index, message in errors:
                    append(INT32.pack(batch_index))
                    append(write_nullable_string(message))
                append(write_nullable_string(p.error_message))
        if flexible:
            append(EMPTY_TAGGED_FIELDS)
    append(INT32.pack(throttle_time_ms))
    if flexible:
        if node_endpoints and version >= 10:
            append(_node_endpoints_tag(node_endpoints))
        else:
            append(EMPTY_TAGGED_FIELDS)
    return b"".join(out)


# ============================================================================================
# Fetch
# ============================================================================================


@dataclass(slots=True)
class FetchPartition:
    """One partition of a Fetch request; fields absent in a version hold the schema default
    (-1 for current_leader_epoch before v9, last_fetched_epoch before v12, log_start_offset
    before v5)."""

    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int


@dataclass(slots=True)
class FetchTopic:
    """Topic by name (v4-12; ``topic_id`` None) or by id (v13+; ``name`` None)."""

    name: str | None
    topic_id: bytes | None
    partitions: list[FetchPartition]


@dataclass(slots=True)
class FetchRequest:
    """A decoded Fetch request. ``forgotten`` holds (name, topic_id, partitions) per forgotten
    topic (v7+, name before v13, id from v13); ``rack_id`` is "" before v11."""

    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: list[FetchTopic]
    forgotten: list[tuple[str | None, bytes | None, list[int]]]
    rack_id: str


# Fixed part of a request partition per version family, and how it maps onto FetchPartition.
_FETCH_PARTITION_V4 = struct.Struct(">iqi")  # partition, fetch_offset, partition_max_bytes
_FETCH_PARTITION_V5 = struct.Struct(">iqqi")  # partition, fetch_offset, log_start, max_bytes
_FETCH_PARTITION_V9 = struct.Struct(">iiqqi")  # + current_leader_epoch after partition
_FETCH_PARTITION_V12 = struct.Struct(">iiqiqi")  # + last_fetched_epoch after fetch_offset


def _legacy_partition_layout(version: int) -> struct.Struct:
    if version >= 9:
        return _FETCH_PARTITION_V9
    if version >= 5:
        return _FETCH_PARTITION_V5
    return _FETCH_PARTITION_V4


def _legacy_request_partitions(
    values: list[tuple[int, ...]], version: int
) -> list[FetchPartition]:
    """v4-11 partitions from their unpacked fixed fields, absent fields at their defaults."""
    if version >= 9:
        return [FetchPartition(p, cle, off, -1, lso, mx) for p, cle, off, lso, mx in values]
    if version >= 5:
        return [FetchPartition(p, -1, off, -1, lso, mx) for p, off, lso, mx in values]
    return [FetchPartition(p, -1, off, -1, -1, mx) for p, off, mx in values]


def _int32_list(r: Reader, count: int) -> list[int]:
    return list(struct.unpack(f">{count}i", r.raw(4 * count)))


def _flexible_request_partitions(r: Reader, count: int) -> list[FetchPartition]:
    """v12+ partitions: the fixed fields in one unpack, then a (usually empty) tag section."""
    buf = r.buf
    pos = r.pos
    unpack = _FETCH_PARTITION_V12.unpack_from
    step = _FETCH_PARTITION_V12.size
    partitions: list[FetchPartition] = []
    append = partitions.append
    try:
        for _ in range(count):
            append(FetchPartition(*unpack(buf, pos)))
            pos += step
            if buf[pos] == 0:
                pos += 1
            else:  # tagged fields (v17 replica_directory_id, v18 high_watermark) are skipped
                r.pos = pos
                r.skip_tagged_fields()
                pos = r.pos
    except (struct.error, IndexError):
        raise InvalidRequestError(f"truncated fetch partition at byte {pos}") from None
    r.pos = pos
    return partitions


def decode_fetch_request(body: memoryview, version: int) -> FetchRequest:
    """Decode a Fetch request body (the bytes after the request header).

    Wire layout (``[]`` = array, int32 count in v4-11, uvarint N+1 in v12+)::

        replica_id              int32   v4-14 (v15+: tag 1, default -1)
        max_wait_ms             int32
        min_bytes               int32
        max_bytes               int32
        isolation_level         int8
        session_id              int32   v7+ (default 0)
        session_epoch           int32   v7+ (default -1)
        topics []:
            topic               string  v4-12 (compact in v12)
            topic_id            uuid    v13+
            partitions []:
                partition               int32
                current_leader_epoch    int32   v9+  (default -1)
                fetch_offset            int64
                last_fetched_epoch      int32   v12+ (default -1)
                log_start_offset        int64   v5+  (default -1)
                partition_max_bytes     int32
                <tags>                  v12+ (0 = replica_directory_id, v17: skipped)
            <tags>              v12+
        forgotten_topics_data []:       v7+
            topic               string  v7-12 (compact in v12)
            topic_id            uuid    v13+
            partitions          []int32
            <tags>              v12+
        rack_id                 string  v11+ (compact in v12+; default "")
        <tags>                  v12+: 0 = cluster_id (skipped),
                                      1 = replica_state {replica_id int32,
                                          replica_epoch int64, <tags>} (v15+)
    """
    _check_version("Fetch", version, FETCH_VERSIONS)
    r = Reader(body)
    flexible = version >= _FETCH_FLEXIBLE
    by_id = version >= _FETCH_TOPIC_IDS
    if version >= _FETCH_REPLICA_STATE:
        replica_id = -1  # unless the ReplicaState tag says otherwise
        max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, session_epoch = r.unpack(
            _FETCH_HEAD_V15
        )
    elif version >= 7:
        (
            replica_id,
            max_wait_ms,
            min_bytes,
            max_bytes,
            isolation_level,
            session_id,
            session_epoch,
        ) = r.unpack(_FETCH_HEAD_V7)
    else:
        replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level = r.unpack(_FETCH_HEAD_V4)
        session_id, session_epoch = 0, -1
    topics: list[FetchTopic] = []
    name: str | None
    topic_id: bytes | None
    if flexible:
        for _ in range(_non_null(r.compact_array_length(), "topics")):
            if by_id:
                name, topic_id = None, r.uuid()
            else:
                name, topic_id = r.compact_string(), None
            count = _non_null(r.compact_array_length(), "partitions")
            topics.append(FetchTopic(name, topic_id, _flexible_request_partitions(r, count)))
            r.skip_tagged_fields()
    else:
        for _ in range(_non_null(r.array_length(), "topics")):
            name = r.string()
            count = _non_null(r.array_length(), "partitions")
            # Non-flexible partitions are fixed-size records: unpack them in one go.
            layout = _legacy_partition_layout(version)
            chunk = r.raw(count * layout.size)
            values = list(layout.iter_unpack(chunk))
            topics.append(FetchTopic(name, None, _legacy_request_partitions(values, version)))
    forgotten: list[tuple[str | None, bytes | None, list[int]]] = []
    if version >= 7:
        if flexible:
            for _ in range(_non_null(r.compact_array_length(), "forgotten_topics_data")):
                if by_id:
                    name, topic_id = None, r.uuid()
                else:
                    name, topic_id = r.compact_string(), None
                ids = _int32_list(r, _non_null(r.compact_array_length(), "partitions"))
                r.skip_tagged_fields()
                forgotten.append((name, topic_id, ids))
        else:
            for _ in range(_non_null(r.array_length(), "forgotten_topics_data")):
                name = r.string()
                ids = _int32_list(r, _non_null(r.array_length(), "partitions"))
                forgotten.append((name, None, ids))
    rack_id = ""
    if version >= 11:
        rack_id = r.compact_string() if flexible else r.string()
    if flexible:
        for tag, data in r.tagged_fields():
            if tag == 1 and version >= _FETCH_REPLICA_STATE:
                (replica_id, _replica_epoch) = Reader(data).unpack(_I32_I64)
    return FetchRequest(
        replica_id,
        max_wait_ms,
        min_bytes,
        max_bytes,
        isolation_level,
        session_id,
        session_epoch,
        topics,
        forgotten,
        rack_id,
    )


class Region(Protocol):
    """An opaque source of record bytes (the broker passes file regions sent with sendfile)."""

    size: int


RecordParts = list[bytes | memoryview | Region]
ResponsePart = bytes | memoryview | Region


@dataclass(slots=True)
class FetchPartitionResult:
    """One partition of a Fetch response.

    ``records`` is never null on the wire: Kafka's broker sends zero-length records for a
    partition with an error or no data, and librdkafka rejects the whole response when one
    partition's records are null (``invalid MessageSetSize -1``), so it never sees the error
    code and never applies ``auto.offset.reset``. Leave ``records`` empty for such partitions.
    ``aborted_transactions`` None is sent as null (Kafka's answer to read_uncommitted fetches
    and to partitions with an error); an empty list as an empty array. ``diverging_epoch``
    (epoch, end_offset) and ``current_leader`` (leader_id, leader_epoch) are tagged fields
    (v12+) written only when set; ``preferred_read_replica`` exists from v11.
    """

    partition: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: list[tuple[int, int]] | None = None
    preferred_read_replica: int = -1
    records: Sequence[ResponsePart] = ()
    diverging_epoch: tuple[int, int] | None = None
    current_leader: tuple[int, int] | None = None


@dataclass(slots=True)
class FetchTopicResult:
    """Topic by name (v4-12) or by id (v13+)."""

    name: str | None
    topic_id: bytes | None
    partitions: list[FetchPartitionResult]


# Partition head up to and including log_start_offset.
_FETCH_RESULT_V4 = struct.Struct(">ihqq")  # partition, error, high_watermark, last_stable
_FETCH_RESULT_V5 = struct.Struct(">ihqqq")  # + log_start_offset
_BUFFERS = (bytes, memoryview, bytearray)


def _partition_tags(p: FetchPartitionResult) -> bytes:
    # Like Kafka's generated code, a struct equal to its default (-1, -1) is not written.
    fields: list[tuple[int, bytes]] = []
    if p.diverging_epoch is not None and p.diverging_epoch != _UNSET_PAIR:
        epoch, end_offset = p.diverging_epoch
        fields.append((0, _I32_I64.pack(epoch, end_offset) + EMPTY_TAGGED_FIELDS))
    if p.current_leader is not None and p.current_leader != _UNSET_PAIR:
        fields.append(_leader_tag(1, p.current_leader))
    return write_tagged_fields(fields)


def _aborted(aborted: list[tuple[int, int]], flexible: bool) -> bytes:
    if flexible:
        items = [_I64_I64.pack(pid, first) + EMPTY_TAGGED_FIELDS for pid, first in aborted]
        return write_uvarint(len(items) + 1) + b"".join(items)
    return INT32.pack(len(aborted)) + b"".join(_I64_I64.pack(pid, first) for pid, first in aborted)


# Partition loops, one per encoding family. Each partition costs one struct.pack for its
# fixed fields (aborted-transaction marker and preferred replica included when there are no
# aborted transactions, the usual case), the records length, and the records' parts: buffers
# join the pending pieces, a Region closes them into one bytes and is passed through as is.
_FLEX_HEAD = struct.Struct(">ihqqqBi")  # ..., log_start, aborted (0 null / 1 empty), replica
_V11_HEAD = struct.Struct(">ihqqqiii")  # ..., log_start, aborted count, replica, records len
_V5_HEAD = struct.Struct(">ihqqqii")  # ..., log_start, aborted count, records len
_V4_HEAD = struct.Struct(">ihqqii")  # ..., last_stable, aborted count, records len


def _flexible_fetch_partitions(
    partitions: list[FetchPartitionResult],
    pieces: list[bytes | memoryview],
    parts: list[ResponsePart],
) -> None:
    """v12+ partitions (see :func:`encode_fetch_response` for the layout)."""
    append = pieces.append
    buffers = _BUFFERS
    for p in partitions:
        aborted = p.aborted_transactions
        if not aborted:
            append(
                _FLEX_HEAD.pack(
                    p.partition,
                    p.error_code,
                    p.high_watermark,
                    p.last_stable_offset,
                    p.log_start_offset,
                    0 if aborted is None else 1,
                    p.preferred_read_replica,
                )
            )
        else:
            append(
                _FETCH_RESULT_V5.pack(
                    p.partition,
                    p.error_code,
                    p.high_watermark,
                    p.last_stable_offset,
                    p.log_start_offset,
                )
            )
            append(_aborted(aborted, True))
            append(INT32.pack(p.preferred_read_replica))
        records = p.records
        size = 1  # compact length: N+1 (never 0, null)
        for part in records:
            size += len(part) if isinstance(part, buffers) else part.size
        if 0x80 <= size < 0x200000:  # the 2-3 byte forms, inlined (records of 127 B-2 MiB)
            if size < 0x4000:
                append(bytes(((size & 0x7F) | 0x80, size >> 7)))
            else:
                append(bytes(((size & 0x7F) | 0x80, ((size >> 7) & 0x7F) | 0x80, size >> 14)))
        else:
            append(write_uvarint(size))
        for part in records:
            if isinstance(part, buffers):
                append(part)
            else:
                if pieces:
                    parts.append(b"".join(pieces))
                    pieces.clear()
                parts.append(part)
        if p.diverging_epoch is None and p.current_leader is None:
            append(EMPTY_TAGGED_FIELDS)
        else:
            append(_partition_tags(p))


def _legacy_fetch_partitions(
    version: int,
    partitions: list[FetchPartitionResult],
    pieces: list[bytes | memoryview],
    parts: list[ResponsePart],
) -> None:
    """v4-11 partitions (see :func:`encode_fetch_response` for the layout)."""
    append = pieces.append
    buffers = _BUFFERS
    v5 = version >= 5
    v11 = version >= 11
    for p in partitions:
        records = p.records
        size = 0
        for part in records:
            size += len(part) if isinstance(part, buffers) else part.size
        aborted = p.aborted_transactions
        if not aborted:
            count = -1 if aborted is None else 0
            if v11:
                append(
                    _V11_HEAD.pack(
                        p.partition,
                        p.error_code,
                        p.high_watermark,
                        p.last_stable_offset,
                        p.log_start_offset,
                        count,
                        p.preferred_read_replica,
                        size,
                    )
                )
            elif v5:
                append(
                    _V5_HEAD.pack(
                        p.partition,
                        p.error_code,
                        p.high_watermark,
                        p.last_stable_offset,
                        p.log_start_offset,
                        count,
                        size,
                    )
                )
            else:
                append(
                    _V4_HEAD.pack(
                        p.partition,
                        p.error_code,
                        p.high_watermark,
                        p.last_stable_offset,
                        count,
                        size,
                    )
                )
        else:
            if v5:
                append(
                    _FETCH_RESULT_V5.pack(
                        p.partition,
                        p.error_code,
                        p.high_watermark,
                        p.last_stable_offset,
                        p.log_start_offset,
                    )
                )
            else:
                append(
                    _FETCH_RESULT_V4.pack(
                        p.partition, p.error_code, p.high_watermark, p.last_stable_offset
                    )
                )
            append(_aborted(aborted, False))
            if v11:
                append(INT32.pack(p.preferred_read_replica))
            append(INT32.pack(size))
        if records:
            for part in records:
                if isinstance(part, buffers):
                    append(part)
                else:
                    if pieces:
                        parts.append(b"".join(pieces))
                        pieces.clear()
                    parts.append(part)


def encode_fetch_response(
    version: int,
    topics: list[FetchTopicResult],
    *,
    throttle_time_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
    node_endpoints: Sequence[NodeEndpoint] | None = None,
) -> list[ResponsePart]:
    """Encode a Fetch response body (no response header) as a list of parts.

    Wire layout (``[]`` = array, int32 count in v4-11, uvarint N+1 in v12+)::

        throttle_time_ms        int32
        error_code              int16   v7+
        session_id              int32   v7+
        responses []:
            topic               string  v4-12 (compact in v12)
            topic_id            uuid    v13+
            partitions []:
                partition_index         int32
                error_code              int16
                high_watermark          int64
                last_stable_offset      int64
                log_start_offset        int64   v5+
                aborted_transactions [] nullable: producer_id int64, first_offset int64
                                        (+ <tags> in v12+)
                preferred_read_replica  int32   v11+
                records                 bytes (compact in v12+); nullable in the schema,
                                        never null from a broker (empty on an error)
                <tags>                  v12+: 0 = diverging_epoch, 1 = current_leader
                                        (each only when set)
            <tags>              v12+
        <tags>                  v12+: 0 = node_endpoints (v16+, only when non-empty)

    The result holds ``bytes`` pieces and the caller's :class:`Region` objects, in order.
    Buffer record parts (bytes / memoryview) are joined into the surrounding bytes.
    """
    _check_version("Fetch", version, FETCH_VERSIONS)
    flexible = version >= _FETCH_FLEXIBLE
    by_id = version >= _FETCH_TOPIC_IDS
    parts: list[ResponsePart] = []
    pieces: list[bytes | memoryview] = []
    append = pieces.append
    if version >= 7:
        append(_I32_I16_I32.pack(throttle_time_ms, error_code, session_id))
    else:
        append(INT32.pack(throttle_time_ms))
    append(write_uvarint(len(topics) + 1) if flexible else INT32.pack(len(topics)))
    for topic in topics:
        if by_id:
            append(topic.topic_id or ZERO_UUID)
        elif flexible:
            append(write_compact_string(topic.name or ""))
        else:
            append(write_string(topic.name or ""))
        partitions = topic.partitions
        if flexible:
            append(write_uvarint(len(partitions) + 1))
            _flexible_fetch_partitions(partitions, pieces, parts)
        else:
            append(INT32.pack(len(partitions)))
            _legacy_fetch_partitions(version, partitions, pieces, parts)
        if flexible:
            append(EMPTY_TAGGED_FIELDS)
    if flexible:
        if node_endpoints and version >= 16:
            append(_node_endpoints_tag(node_endpoints))
        else:
            append(EMPTY_TAGGED_FIELDS)
    if pieces:
        parts.append(b"".join(pieces))
    return parts


__all__ = [
    "FETCH_VERSIONS",
    "PRODUCE_VERSIONS",
    "FetchPartition",
    "FetchPartitionResult",
    "FetchRequest",
    "FetchTopic",
    "FetchTopicResult",
    "NodeEndpoint",
    "ProducePartition",
    "ProducePartitionResult",
    "ProduceRequest",
    "ProduceTopic",
    "ProduceTopicResult",
    "RecordParts",
    "Region",
    "ResponsePart",
    "decode_fetch_request",
    "decode_produce_request",
    "encode_fetch_response",
    "encode_produce_response",
]
