"""The columnar decoder against the record reader (the oracle), field by field.

Property-style: seeded random record sets — every codec, null / empty / > 16 KiB keys and
values, headers with non-ASCII keys and null values, large and negative timestamp deltas,
offset gaps, LogAppendTime and control batches, empty batches, runs of equal-size records,
start / end cutting into batches, a truncated trailing batch — and byte-level corruption.
Needs pyarrow and numpy only (no SparkSession).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

import pyarrow as pa

from strom.common.errors import CorruptMessageError
from strom.protocol.records.batch import HEADER_SIZE, set_log_append_time
from strom.protocol.records.builder import BatchBuilder, build_control_batch
from strom.protocol.records.compression import Compression
from strom.protocol.records.control import ControlType
from strom.protocol.records.reader import decode_batches
from strom.spark.arrow_records import decode_to_arrow
from strom.spark.schema import arrow_schema

TOPIC = "tópico"
PARTITION = 7
HEADER_KEYS = ["", "h", "trace-id", "ключ", "日本語", "é" * 40]


# ---------------------------------------------------------------------------- the oracle


@dataclass
class Expected:
    rows: list[dict[str, Any]]
    position: int


def oracle(raw: bytes, start: int, end: int, verify_crc: bool = True) -> Expected:
    """What the record-at-a-time reader gives: rows in range and the next fetch position."""
    rows: list[dict[str, Any]] = []
    position = start
    for header, records in decode_batches(raw, verify_crc=verify_crc):
        if not header.is_control:
            for r in records:
                if start <= r.offset < end:
                    rows.append({
                        "key": r.key, "value": r.value, "offset": r.offset,
                        "timestamp": r.timestamp * 1000,
                        "timestampType": 1 if header.is_log_append_time else 0,
                        "headers": [(k, v) for k, v in r.headers],
                    })
        position = max(position, min(header.next_offset, end))
        if position >= end:
            break
    return Expected(rows, position)


def columns(batch: Any) -> list[dict[str, Any]]:
    """The rows of a decoded batch in the oracle's shape (timestamps as int64 µs)."""
    assert batch.column("topic").to_pylist() == [TOPIC] * batch.num_rows
    assert batch.column("partition").to_pylist() == [PARTITION] * batch.num_rows
    names = ["key", "value", "offset", "timestampType"]
    data = {name: batch.column(name).to_pylist() for name in names}
    data["timestamp"] = batch.column("timestamp").cast(pa.int64()).to_pylist()
    if "headers" in batch.schema.names:
        data["headers"] = [[(h["key"], h["value"]) for h in hs]
                           for hs in batch.column("headers").to_pylist()]
    return [{name: data[name][i] for name in data} for i in range(batch.num_rows)]


def check(raw: bytes, start: int, end: int, include_headers: bool) -> Expected:
    expected = oracle(raw, start, end)
    batch, position = decode_to_arrow(raw, TOPIC, PARTITION, start, end, include_headers)
    assert position == expected.position
    if not expected.rows:
        assert batch is None
        return expected
    assert batch is not None
    assert batch.schema == arrow_schema(include_headers)
    batch.validate(full=True)
    if not include_headers:
        for row in expected.rows:
            del row["headers"]
    got = columns(batch)
    assert len(got) == len(expected.rows)
    for row, want in zip(got, expected.rows, strict=True):
        assert row == want
    return expected


# ---------------------------------------------------------------------- random record sets


def random_bytes(rng: random.Random, *, large: bool = True) -> bytes | None:
    kind = rng.random()
    if kind < 0.1:
        return None
    if kind < 0.2:
        return b""
    if large and kind > 0.97:
        return rng.randbytes(rng.randint(16 * 1024 + 1, 40 * 1024))
    return rng.randbytes(rng.choice([1, 5, 10, 63, 64, 100, 200, 9000]) if kind > 0.9
                         else rng.randint(1, 120))


def random_headers(rng: random.Random) -> list[tuple[str, bytes | None]]:
    if rng.random() < 0.5:
        return []
    return [(rng.choice(HEADER_KEYS), random_bytes(rng, large=False))
            for _ in range(rng.randint(1, 4))]


def random_timestamp_delta(rng: random.Random) -> int:
    return rng.choice([0, 1, rng.randint(-64, 64), rng.randint(-10**6, 10**6),
                       rng.randint(-10**11, 10**11), 2**40])


def data_batch(rng: random.Random, base_offset: int) -> tuple[bytes, int]:
    """A random data batch at ``base_offset`` and its next offset."""
    codec = rng.choice(list(Compression))
    log_append = rng.random() < 0.2
    builder = BatchBuilder(compression=codec, base_offset=base_offset,
                           log_append_time=log_append)
    shape = rng.random()
    count = rng.choice([0, 1, 2, 5, 30, 70, 150]) if shape > 0.3 else rng.randint(64, 300)
    base_timestamp = rng.randint(0, 2_000_000_000_000)
    fixed_value = rng.randbytes(rng.choice([0, 20, 100, 300]))
    delta = -1
    gaps = 0.01 if shape <= 0.3 else 0.2
    for i in range(count):
        delta += rng.randint(2, 100) if rng.random() < gaps else 1  # as after compaction
        if shape <= 0.3:  # equal-size records, now and then another size
            odd = rng.random() < 0.01
            value: bytes | None = rng.randbytes(7) if odd else fixed_value
            builder.append(base_timestamp, b"k", value, offset_delta=delta)
        else:
            builder.append(base_timestamp + random_timestamp_delta(rng) + i,
                           random_bytes(rng), random_bytes(rng), random_headers(rng),
                           offset_delta=delta)
    data = builder.build()
    if log_append:
        patched = bytearray(data)
        set_log_append_time(patched, 0, len(patched), rng.randint(0, 2_000_000_000_000))
        data = bytes(patched)
    return data, base_offset + max(delta, 0) + 1


def record_set(rng: random.Random, first_offset: int = 0) -> tuple[bytes, int]:
    """Random batches back to back (some control, some not), and the offset after them."""
    parts = []
    offset = first_offset
    for _ in range(rng.randint(1, 8)):
        offset += rng.choice([0, 0, 0, 1, 50])
        if rng.random() < 0.15:
            parts.append(build_control_batch(
                rng.choice([ControlType.COMMIT, ControlType.ABORT]), producer_id=5,
                producer_epoch=0, coordinator_epoch=1, timestamp=1_000, base_offset=offset))
            offset += 1
        else:
            data, offset = data_batch(rng, offset)
            parts.append(data)
    return b"".join(parts), offset


@pytest.mark.parametrize("seed", range(150))
def test_matches_the_record_reader(seed: int) -> None:
    rng = random.Random(seed)
    raw, next_offset = record_set(rng, rng.randint(0, 10**12))
    first = decode_batches(raw).__next__()[0].base_offset
    include_headers = seed % 2 == 0
    check(raw, first, next_offset, include_headers)  # everything
    for _ in range(4):  # start / end cutting into batches
        start = rng.randint(first - 2, next_offset + 1)
        end = rng.randint(start, next_offset + 2)
        check(raw, start, end, include_headers)
    if len(raw) > HEADER_SIZE:  # a fetch that cut the last batch short
        cut = raw[: rng.randint(1, len(raw) - 1)]
        check(cut, first, next_offset, include_headers)


def test_nulls_empties_and_three_byte_lengths() -> None:
    builder = BatchBuilder(base_offset=10)
    big = bytes(range(256)) * 80  # 20 KiB: 3-byte length varints
    records = [(None, None, []), (b"", b"", []), (big, b"v", [("k", None)]),
               (b"k", big, [("", b""), ("é", big)]), (None, b"x", [])]
    for key, value, headers in records:
        builder.append(1_000, key, value, headers)
    raw = builder.build()
    expected = check(raw, 10, 15, include_headers=True)
    assert [row["key"] for row in expected.rows] == [None, b"", big, b"k", None]
    batch, position = decode_to_arrow(raw, TOPIC, PARTITION, 0, 100, True)
    assert batch is not None and position == 15
    assert batch.column("value").null_count == 1
    assert batch.column("headers").to_pylist()[2] == [{"key": "k", "value": None}]


def test_log_append_time_uses_the_batch_max_timestamp() -> None:
    builder = BatchBuilder(log_append_time=True)
    for i in range(3):
        builder.append(100 + i, b"k", b"v")
    raw = bytearray(builder.build())
    set_log_append_time(raw, 0, len(raw), 987_654)
    batch, _ = decode_to_arrow(bytes(raw), TOPIC, PARTITION, 0, 3, False)
    assert batch is not None
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [987_654_000] * 3
    assert batch.column("timestampType").to_pylist() == [1, 1, 1]


def test_control_batches_give_no_rows_but_advance() -> None:
    marker = build_control_batch(ControlType.COMMIT, producer_id=1, producer_epoch=0,
                                 coordinator_epoch=0, timestamp=5, base_offset=40)
    assert decode_to_arrow(marker, TOPIC, PARTITION, 40, 100, False) == (None, 41)
    assert decode_to_arrow(marker, TOPIC, PARTITION, 40, 41, True) == (None, 41)


def test_position_when_nothing_is_complete_or_in_range() -> None:
    builder = BatchBuilder(base_offset=0)
    for i in range(10):
        builder.append(i, b"k", b"v")
    raw = builder.build()
    assert decode_to_arrow(raw[:-1], TOPIC, PARTITION, 3, 10, False) == (None, 3)
    assert decode_to_arrow(b"", TOPIC, PARTITION, 3, 10, False) == (None, 3)
    assert decode_to_arrow(raw, TOPIC, PARTITION, 10, 20, False) == (None, 10)
    batch, position = decode_to_arrow(memoryview(raw), TOPIC, PARTITION, 3, 5, False)
    assert batch is not None and batch.column("offset").to_pylist() == [3, 4]
    assert position == 5


def _corruptions(seed: int) -> tuple[bytes, int]:
    rng = random.Random(seed)
    builder = BatchBuilder(base_offset=0)
    def small() -> bytes | None:
        return rng.choice([None, b"", rng.randbytes(rng.randint(1, 6))])

    for i in range(rng.randint(1, 80)):
        headers = [(rng.choice(HEADER_KEYS), small()) for _ in range(rng.choice([0, 0, 1, 2]))]
        builder.append(1_000 + i * rng.choice([1, 100]), small(), small(), headers)
    raw = bytearray(builder.build())
    for _ in range(rng.randint(1, 3)):
        raw[rng.randrange(HEADER_SIZE, len(raw))] = rng.randrange(256)
    return bytes(raw), builder.records_count


@pytest.mark.parametrize("seed", range(300))
def test_corrupt_records_fail_like_the_record_reader(seed: int) -> None:
    raw, count = _corruptions(seed)
    try:
        expected: Expected | None = oracle(raw, 0, count, verify_crc=False)
    except CorruptMessageError:
        expected = None
    if expected is None or any(not -(2**63) <= row["timestamp"] < 2**63
                               for row in expected.rows):
        with pytest.raises(CorruptMessageError):
            decode_to_arrow(raw, TOPIC, PARTITION, 0, count, True, verify_crc=False)
        return
    batch, position = decode_to_arrow(raw, TOPIC, PARTITION, 0, count, True, verify_crc=False)
    assert position == expected.position
    assert (columns(batch) if batch is not None else []) == expected.rows


def test_timestamps_outside_the_microsecond_column_are_rejected() -> None:
    builder = BatchBuilder()
    builder.append(-1, b"k", b"v")  # NO_TIMESTAMP stays -1 ms
    builder.append((2**63 - 1) // 1000, b"k", b"v")  # the largest that fits in µs
    raw = builder.build()
    batch, _ = decode_to_arrow(raw, TOPIC, PARTITION, 0, 2, False)
    assert batch is not None
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [
        -1000, (2**63 - 1) // 1000 * 1000]
    builder = BatchBuilder()
    builder.append(0, b"k", b"v")
    builder.append(2**62, b"k", b"v")  # base + delta fits int64 ms, not int64 µs
    with pytest.raises(CorruptMessageError, match="timestamp"):
        decode_to_arrow(builder.build(), TOPIC, PARTITION, 0, 2, False)
    batch, _ = decode_to_arrow(builder.build(), TOPIC, PARTITION, 0, 1, False)
    assert batch is not None and batch.num_rows == 1  # only rows in range are checked


def test_read_range_slices_keep_at_most_batch_rows() -> None:
    from strom.spark.partition_reader import _slices

    builder = BatchBuilder()
    for i in range(25):
        builder.append(i, None, b"%d" % i)
    batch, _ = decode_to_arrow(builder.build(), TOPIC, PARTITION, 0, 25, False)
    assert batch is not None
    slices = list(_slices(batch, 10))
    assert [s.num_rows for s in slices] == [10, 10, 5]
    assert pa.Table.from_batches(slices).column("value").to_pylist() == [
        b"%d" % i for i in range(25)]
