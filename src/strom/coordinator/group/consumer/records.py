"""KIP-848 consumer-group records of ``__consumer_offsets``, in Kafka's exact formats (sans-io).

Framing is that of every coordinator record (Kafka's ``CoordinatorRecordSerde``): the key is an
int16 record *type* followed by a non-flexible body (int16-length strings); the value is an
int16 *value version* followed by the body, and a null value is a tombstone. Every value below
has only version 0 (Kafka 4.x), which is what strom writes and the only one it reads; all are
*flexible*: compact strings/arrays (unsigned-varint length + 1, 0 = null), a UUID is 16 raw
bytes, and each struct ends with a tagged-field section (varint count, then tag / size / bytes
each). Unknown tagged fields are skipped on read.

Keys (type: fields):

- 3 ``ConsumerGroupMetadataKey``: group;
- 4 ``ConsumerGroupPartitionMetadataKey``: group (Kafka < 4.1 wrote it; only decoded, so that
  replay can tombstone it — its value is kept opaque);
- 5 ``ConsumerGroupMemberMetadataKey``: group, member_id;
- 6 ``ConsumerGroupTargetAssignmentMetadataKey``: group;
- 7 ``ConsumerGroupTargetAssignmentMemberKey``: group, member_id;
- 8 ``ConsumerGroupCurrentMemberAssignmentKey``: group, member_id;
- 16 ``ConsumerGroupRegularExpressionKey``: group, regular_expression.

Values (version 0):

- ``ConsumerGroupMetadataValue``: epoch int32; tags: 0 = MetadataHash int64 (written only when
  non-zero).
- ``ConsumerGroupMemberMetadataValue``: instance_id nullable string, rack_id nullable string,
  client_id string, client_host string, subscribed_topic_names [string], subscribed_topic_regex
  nullable string, rebalance_timeout_ms int32, server_assignor nullable string; tags: 0 =
  ClassicMemberMetadata (skipped: strom's members speak the consumer protocol).
- ``ConsumerGroupTargetAssignmentMetadataValue``: assignment_epoch int32; tags: 0 =
  AssignmentTimestamp int64 (4.3+, skipped).
- ``ConsumerGroupTargetAssignmentMemberValue``: topic_partitions [topic_id uuid, partitions
  [int32], tags].
- ``ConsumerGroupCurrentMemberAssignmentValue``: member_epoch int32, previous_member_epoch int32,
  state int8, assigned_partitions and partitions_pending_revocation, each [topic_id uuid,
  partitions [int32], tags (0 = AssignmentEpochs, skipped)].
- ``ConsumerGroupRegularExpressionValue``: topics [string], version int64, timestamp int64.
- ``ConsumerGroupPartitionMetadataValue``: kept as its raw body.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from strom.coordinator.codec import Reader, RecordFormatError, encode_string
from strom.protocol.primitives import write_compact_nullable_string as _cstring
from strom.protocol.primitives import write_uvarint as _uvarint

__all__ = ["RecordFormatError"]

#: (topic id, partitions) pairs, in the order given (``topic_partitions`` sorts them).
TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]

CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
CONSUMER_GROUP_REGULAR_EXPRESSION = 16
VALUE_VERSION = 0

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def topic_partitions(assignment: Mapping[uuid.UUID, Iterable[int]]) -> TopicPartitions:
    """The canonical form of an assignment: topics by id bytes, partitions ascending."""
    return tuple((topic, tuple(sorted(parts)))
                 for topic, parts in sorted(assignment.items(), key=lambda kv: kv[0].bytes))


# -- typed records ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionKey:
    group: str
    regular_expression: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int
    metadata_hash: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    body: bytes  # opaque: the value after its version


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    topic_partitions: TopicPartitions


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: TopicPartitions
    partitions_pending_revocation: TopicPartitions
    #: per assigned topic, the member epoch each of its partitions was assigned at (in the
    #: order of ``assigned_partitions``' partitions); tag 0 of the topic's struct, written
    #: only for topics listed here (Kafka 4.4's ``AssignmentEpochs``)
    assignment_epochs: tuple[tuple[uuid.UUID, tuple[int, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionValue:
    topics: tuple[str, ...]
    version: int
    timestamp: int


ConsumerKey = (ConsumerGroupMetadataKey | ConsumerGroupPartitionMetadataKey
               | ConsumerGroupMemberMetadataKey | ConsumerGroupTargetAssignmentMetadataKey
               | ConsumerGroupTargetAssignmentMemberKey | ConsumerGroupCurrentMemberAssignmentKey
               | ConsumerGroupRegularExpressionKey)
ConsumerValue = (ConsumerGroupMetadataValue | ConsumerGroupPartitionMetadataValue
                 | ConsumerGroupMemberMetadataValue | ConsumerGroupTargetAssignmentMetadataValue
                 | ConsumerGroupTargetAssignmentMemberValue
                 | ConsumerGroupCurrentMemberAssignmentValue | ConsumerGroupRegularExpressionValue)

#: Key types by record type: those with a group only, and those with a group and a second string.
_GROUP_KEYS: dict[int, Callable[[str], ConsumerKey]] = {
    CONSUMER_GROUP_METADATA: ConsumerGroupMetadataKey,
    CONSUMER_GROUP_PARTITION_METADATA: ConsumerGroupPartitionMetadataKey,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: ConsumerGroupTargetAssignmentMetadataKey,
}
_PAIR_KEYS: dict[int, Callable[[str, str], ConsumerKey]] = {
    CONSUMER_GROUP_MEMBER_METADATA: ConsumerGroupMemberMetadataKey,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: ConsumerGroupTargetAssignmentMemberKey,
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: ConsumerGroupCurrentMemberAssignmentKey,
    CONSUMER_GROUP_REGULAR_EXPRESSION: ConsumerGroupRegularExpressionKey,
}
_KEY_TYPES: dict[object, int] = {cls: kind for table in (_GROUP_KEYS, _PAIR_KEYS)
                                 for kind, cls in table.items()}
CONSUMER_KEY_TYPES: frozenset[int] = frozenset(_KEY_TYPES.values())


# -- compact (flexible) writers -----------------------------------------------------------
def _ctopic_partitions(pairs: TopicPartitions,
                       epochs: Mapping[uuid.UUID, tuple[int, ...]] | None = None) -> bytes:
    out = [_uvarint(len(pairs) + 1)]
    for topic, parts in pairs:
        out += [topic.bytes, _uvarint(len(parts) + 1), *map(_I32.pack, parts)]
        mine = (epochs or {}).get(topic)
        if mine is None:
            out.append(b"\x00")
            continue
        payload = _uvarint(len(mine) + 1) + b"".join(map(_I32.pack, mine))
        out += [b"\x01\x00", _uvarint(len(payload)), payload]  # one tagged field: tag 0
    return b"".join(out)


# -- writing ----------------------------------------------------------------------------
def encode_consumer_key(key: ConsumerKey) -> bytes:
    out = [_I16.pack(_KEY_TYPES[type(key)]), encode_string(key.group)]
    if isinstance(key, ConsumerGroupRegularExpressionKey):
        out.append(encode_string(key.regular_expression))
    elif hasattr(key, "member_id"):
        out.append(encode_string(key.member_id))
    return b"".join(out)


def _encode_body(value: ConsumerValue) -> bytes:
    if isinstance(value, ConsumerGroupMetadataValue):
        tags = b"\x01\x00\x08" + _I64.pack(value.metadata_hash) if value.metadata_hash else b"\x00"
        return _I32.pack(value.epoch) + tags
    if isinstance(value, ConsumerGroupPartitionMetadataValue):
        return value.body
    if isinstance(value, ConsumerGroupMemberMetadataValue):
        names = value.subscribed_topic_names
        return b"".join((_cstring(value.instance_id), _cstring(value.rack_id),
                         _cstring(value.client_id), _cstring(value.client_host),
                         _uvarint(len(names) + 1), *map(_cstring, names),
                         _cstring(value.subscribed_topic_regex),
                         _I32.pack(value.rebalance_timeout_ms), _cstring(value.server_assignor),
                         b"\x00"))
    if isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
        return _I32.pack(value.assignment_epoch) + b"\x00"
    if isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
        return _ctopic_partitions(value.topic_partitions) + b"\x00"
    if isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
        return b"".join((_I32.pack(value.member_epoch), _I32.pack(value.previous_member_epoch),
                         _I8.pack(value.state),
                         _ctopic_partitions(value.assigned_partitions,
                                            dict(value.assignment_epochs)),
                         _ctopic_partitions(value.partitions_pending_revocation), b"\x00"))
    return b"".join((_uvarint(len(value.topics) + 1), *map(_cstring, value.topics),
                     _I64.pack(value.version), _I64.pack(value.timestamp), b"\x00"))


def encode_consumer_value(value: ConsumerValue | None) -> bytes | None:
    """The value's bytes (version 0); None (a tombstone) for None."""
    if value is None:
        return None
    return _I16.pack(VALUE_VERSION) + _encode_body(value)


# -- reading ----------------------------------------------------------------------------
def decode_consumer_key(data: bytes) -> ConsumerKey | None:
    """The key's typed form; None for record types that are not a consumer group's."""
    reader = Reader(bytes(data))
    kind = reader.int16()
    if kind in _GROUP_KEYS:
        return _GROUP_KEYS[kind](reader.string())
    if kind in _PAIR_KEYS:
        return _PAIR_KEYS[kind](reader.string(), reader.string())
    return None

def _read_strings(reader: Reader) -> tuple[str, ...]:
    return tuple(reader.string() for _ in range(reader.array_length()))


def _read_topic_partitions(reader: Reader,
                           epochs: list[tuple[uuid.UUID, tuple[int, ...]]] | None = None
                           ) -> TopicPartitions:
    """The pairs; with ``epochs``, also the topics' AssignmentEpochs (tag 0) appended to it."""
    pairs = []
    for _ in range(reader.array_length()):
        topic = uuid.UUID(bytes=reader.take(16))
        parts = tuple(reader.int32() for _ in range(reader.array_length()))
        for tag, payload in reader.tagged_fields():
            if tag == 0 and epochs is not None:
                inner = Reader(bytes(payload), flexible=True)
                count = inner.array_length()
                epochs.append((topic, tuple(inner.int32() for _ in range(max(count, 0)))))
        pairs.append((topic, parts))
    return tuple(pairs)


def _decode_body(key: ConsumerKey, reader: Reader) -> ConsumerValue:
    if isinstance(key, ConsumerGroupMetadataKey):
        epoch = reader.int32()
        metadata_hash = 0
        for tag, payload in reader.tagged_fields():
            if tag == 0:
                if len(payload) != 8:
                    raise RecordFormatError("bad MetadataHash tagged field")
                metadata_hash = _I64.unpack(payload)[0]
        return ConsumerGroupMetadataValue(epoch, metadata_hash)
    if isinstance(key, ConsumerGroupPartitionMetadataKey):
        return ConsumerGroupPartitionMetadataValue(reader.data[reader.pos:])
    if isinstance(key, ConsumerGroupMemberMetadataKey):
        instance_id = reader.nullable_string()
        rack_id = reader.nullable_string()
        client_id = reader.string()
        client_host = reader.string()
        names = _read_strings(reader)
        regex = reader.nullable_string()
        rebalance_timeout_ms = reader.int32()
        assignor = reader.nullable_string()
        value: ConsumerValue = ConsumerGroupMemberMetadataValue(
            instance_id, rack_id, client_id, client_host, names, regex, rebalance_timeout_ms,
            assignor)
    elif isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
        value = ConsumerGroupTargetAssignmentMetadataValue(reader.int32())
    elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
        value = ConsumerGroupTargetAssignmentMemberValue(_read_topic_partitions(reader))
    elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
        member_epoch, previous_epoch = reader.int32(), reader.int32()
        state: int = _I8.unpack(reader.take(1))[0]
        epochs: list[tuple[uuid.UUID, tuple[int, ...]]] = []
        assigned = _read_topic_partitions(reader, epochs)
        value = ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch, previous_epoch, state, assigned, _read_topic_partitions(reader),
            tuple(epochs))
    else:
        topics = _read_strings(reader)
        value = ConsumerGroupRegularExpressionValue(topics, reader.int64(), reader.int64())
    reader.skip_tagged_fields()
    return value


def decode_consumer_value(key: ConsumerKey, data: bytes | None) -> ConsumerValue | None:
    """The value's typed form for ``key``'s record type; None for a tombstone."""
    if data is None:
        return None
    reader = Reader(bytes(data), flexible=True)
    version = reader.int16()
    if version != VALUE_VERSION:
        raise RecordFormatError(f"unknown {type(key).__name__} value version {version}")
    return _decode_body(key, reader)
