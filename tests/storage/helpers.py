"""Storage test helpers: build magic-v2 record batches by hand, read logs back."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

import cramjam

from strom.common.config import BrokerConfig, TopicConfig, validate_topic_configs
from strom.protocol.records.batch import TRANSACTIONAL_MASK, crc32c
from strom.protocol.records.builder import build_control_batch
from strom.protocol.records.control import ControlType
from strom.storage.log import Log

NOW = 1_700_000_000_000
_HEAD = struct.Struct(">qiibIhiqqqhii")


def varint(value: int) -> bytes:
    """Zigzag varint / varlong."""
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = raw & 0x7F
        raw >>= 7
        if raw:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_record(
    offset_delta: int, ts_delta: int, key: bytes | None, value: bytes | None
) -> bytes:
    body = bytearray(b"\x00")  # attributes
    body += varint(ts_delta) + varint(offset_delta)
    for part in (key, value):
        if part is None:
            body += varint(-1)
        else:
            body += varint(len(part)) + part
    body += varint(0)  # no headers
    return varint(len(body)) + bytes(body)


_CODECS: dict[int, Callable[[bytes], bytes]] = {
    0: lambda b: b,
    1: lambda b: bytes(cramjam.gzip.compress(b)),
    2: lambda b: bytes(cramjam.snappy.compress_raw(b)),
    3: lambda b: bytes(cramjam.lz4.compress(b)),
    4: lambda b: bytes(cramjam.zstd.compress(b)),
}


def make_batch(
    values: Sequence[bytes | None] = (b"v",),
    *,
    timestamps: Sequence[int] | None = None,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    codec: int = 0,
    leader_epoch: int = -1,
    keys: Sequence[bytes | None] | None = None,
    attributes: int = 0,
) -> bytearray:
    """A valid magic-v2 batch holding ``values`` (timestamps default to NOW)."""
    n = len(values)
    stamps = list(timestamps) if timestamps is not None else [NOW] * n
    base_ts = stamps[0] if n else NOW
    keys = keys if keys is not None else [None] * n
    records = b"".join(
        encode_record(i, stamps[i] - base_ts, keys[i], values[i]) for i in range(n)
    )
    records = _CODECS[codec](records)
    attrs = attributes | codec
    body_after_crc = struct.pack(
        ">hiqqqhii", attrs, max(n - 1, 0), base_ts, max(stamps) if n else NOW,
        producer_id, producer_epoch, base_sequence, n,
    ) + records
    crc = crc32c(body_after_crc)
    batch_length = 4 + 1 + 4 + len(body_after_crc)  # leader epoch, magic, crc, rest
    head = struct.pack(">qiibI", base_offset, batch_length, leader_epoch, 2, crc)
    return bytearray(head + body_after_crc)


def batch_around(records: bytes, count: int, *, attributes: int = 0,
                 last_delta: int | None = None, base_ts: int = NOW, max_ts: int = NOW,
                 producer_id: int = -1, base_sequence: int = -1, magic: int = 2,
                 base_offset: int = 0) -> bytearray:
    """A batch with a sound header and CRC around any records section (even a malformed
    one): ``count`` records declared, last offset delta ``count - 1`` unless given."""
    after_crc = struct.pack(
        ">hiqqqhii", attributes, count - 1 if last_delta is None else last_delta, base_ts,
        max_ts, producer_id, 0 if producer_id >= 0 else -1, base_sequence, count) + records
    head = struct.pack(">qiibI", base_offset, 9 + len(after_crc), -1, magic,
                       crc32c(after_crc))
    return bytearray(head + after_crc)


def payload(*batches: bytes | bytearray) -> memoryview:
    """A writable produce payload, as the network layer hands it to Log.append."""
    return memoryview(bytearray(b"".join(batches)))


def values(count: int, size: int = 10, prefix: str = "v") -> list[bytes | None]:
    return [f"{prefix}{i}".encode().ljust(size, b".") for i in range(count)]


def topic_config(*, verify_transactions: bool = False, **overrides: object) -> TopicConfig:
    """A topic config with these overrides (underscores become dots). Transactional batches
    need no KIP-890 verification guard unless ``verify_transactions`` (as in Kafka's log
    tests: the broker turns it on, ``transaction.partition.verification.enable``)."""
    raw = {k.replace("_", "."): str(v) for k, v in overrides.items()}
    broker = BrokerConfig({"transaction.partition.verification.enable": verify_transactions})
    return TopicConfig(broker, validate_topic_configs(raw))


def read_all(plog: Log, start: int | None = None, max_bytes: int = 1 << 30) -> bytes:
    """Every byte from ``start`` (default log start) to the LEO, following segment boundaries."""
    offset = plog.log_start_offset if start is None else start
    out = bytearray()
    while offset < plog.log_end_offset:
        result = plog.read(offset, max_bytes, upper_bound=plog.log_end_offset)
        if not result.regions:  # a gap up to the end (after a mid-batch truncation)
            break
        data = result.to_bytes()
        out += data
        offset = last_offset_in(bytes(data)) + 1
    return bytes(out)


def batch_offsets(data: bytes) -> list[tuple[int, int]]:
    """(base offset, last offset) of each whole batch in ``data``."""
    out = []
    pos = 0
    while pos + 61 <= len(data):
        fields = _HEAD.unpack_from(data, pos)
        size = fields[1] + 12
        if pos + size > len(data):
            break
        out.append((fields[0], fields[0] + fields[6]))
        pos += size
    return out


def last_offset_in(data: bytes) -> int:
    return batch_offsets(data)[-1][1]


def txn_batch(pid: int, seq: int, count: int = 2, *, epoch: int = 0,
              keys: Sequence[bytes | None] | None = None, prefix: str = "v") -> bytearray:
    """A transactional data batch of producer ``pid``."""
    return make_batch(values(count, prefix=prefix), producer_id=pid, producer_epoch=epoch,
                      base_sequence=seq, attributes=TRANSACTIONAL_MASK, keys=keys)


def marker_batch(pid: int, *, commit: bool, epoch: int = 0, coordinator_epoch: int = 0,
                 timestamp: int = NOW) -> bytes:
    """A commit / abort marker (control batch) of ``pid``, as WriteTxnMarkers writes it."""
    return build_control_batch(ControlType.COMMIT if commit else ControlType.ABORT,
                               producer_id=pid, producer_epoch=epoch,
                               coordinator_epoch=coordinator_epoch, timestamp=timestamp)
