"""The column-wise encoder (the Spark writer's) against the record-at-a-time builder.

Byte-exact: every section :func:`encode_records` cuts, sealed with any codec and producer
state, is the very batch :class:`BatchBuilder` builds from the same records one by one (the
codecs are deterministic: gzip with a zero mtime, fixed levels); and
the project's decoders (record reader and the Spark reader's columnar decoder) give back the
rows. Property-style over seeded random record sets: null / empty / > 16 KiB keys and
values, headers with non-ASCII keys and null values, timestamps far apart and out of order,
many partitions, section limits small enough to cut every partition many times, ``binary``
and ``large_binary`` columns. Needs pyarrow and numpy only (no SparkSession, no broker).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

import numpy as np
import pyarrow as pa

from strom.protocol.records.batch import HEADER_SIZE
from strom.protocol.records.builder import BatchBuilder, EncodedRecords
from strom.protocol.records.compression import Compression
from strom.protocol.records.reader import decode_batches
from strom.spark._encode_columns import Varints, pack_varints
from strom.spark.arrow_encode import InvalidRecordColumnError, RecordColumns, encode_records
from strom.spark.arrow_records import decode_to_arrow

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
HEADER_KEYS = ["", "h", "trace-id", "ключ", "日本語", "é" * 40]

Row = tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]


def random_bytes(rng: random.Random) -> bytes | None:
    kind = rng.random()
    if kind < 0.1:
        return None
    if kind < 0.2:
        return b""
    if kind > 0.98:
        return rng.randbytes(rng.randint(16 * 1024 + 1, 40 * 1024))
    return rng.randbytes(rng.choice([1, 5, 63, 64, 100, 200, 9000]) if kind > 0.9
                         else rng.randint(1, 120))


def random_rows(rng: random.Random, n: int) -> list[Row]:
    base = rng.randint(0, 2_000_000_000_000)
    rows: list[Row] = []
    for _ in range(n):
        spread = rng.choice([0, 0, 1, 1000, 10**7, 10**11])
        headers = [] if rng.random() < 0.6 else [
            (rng.choice(HEADER_KEYS), None if rng.random() < 0.2 else rng.randbytes(
                rng.choice([0, 1, 30, 200]))) for _ in range(rng.randint(1, 4))]
        rows.append((random_bytes(rng), random_bytes(rng), base + rng.randint(-spread, spread),
                     headers))
    return rows


def columns_of(rows: list[Row], large: bool = False) -> RecordColumns:
    binary = pa.large_binary() if large else pa.binary()
    headers = pa.array([[{"key": k, "value": v} for k, v in r[3]] or None for r in rows],
                       HEADER_TYPE)
    return RecordColumns.of(pa.array([r[0] for r in rows], binary),
                            pa.array([r[1] for r in rows], binary),
                            np.array([r[2] for r in rows], dtype=np.int64), headers)


def builder_batch(rows: list[Row], **state: Any) -> bytes:
    """The oracle: the same records appended one by one."""
    codec = state.pop("compression", Compression.NONE)
    builder = BatchBuilder(compression=codec)
    for key, value, timestamp, headers in rows:
        builder.append(timestamp, key, value, headers)
    if state:
        builder.set_producer_state(state["producer_id"], state["producer_epoch"],
                                   state["base_sequence"], state.get("transactional", False))
    return builder.build()


def decoded(raw: bytes) -> list[Row]:
    return [(r.key, r.value, r.timestamp, list(r.headers))
            for _, records in decode_batches(raw) for r in records]


@pytest.mark.parametrize("seed", range(12))
def test_sections_are_the_builders_batches_byte_for_byte(seed: int) -> None:
    rng = random.Random(seed)
    rows = random_rows(rng, rng.choice([1, 2, 50, 700]))
    partitions = np.array([rng.randrange(rng.choice([1, 3, 40])) for _ in rows], dtype=np.int32)
    limit = rng.choice([1, 200, 4096, 65536 - HEADER_SIZE])
    sections = encode_records(columns_of(rows, large=seed % 3 == 0), partitions, limit)

    seen: dict[int, list[Row]] = {}
    for partition, section in sections:
        assert isinstance(section, EncodedRecords)
        part = seen.setdefault(partition, [])
        expected = [rows[i] for i in np.flatnonzero(partitions == partition)][
            len(part):len(part) + section.count]
        assert section.count == len(expected) >= 1
        if section.count > 1:
            assert len(section.records) <= limit
        state = {"producer_id": rng.randrange(2**40), "producer_epoch": rng.randrange(2**15),
                 "base_sequence": rng.randrange(2**20), "transactional": rng.random() < 0.3,
                 "compression": rng.choice(list(Compression))}
        raw = section.seal(**state)
        assert raw == builder_batch(expected, **state)  # codecs are deterministic
        assert decoded(raw) == expected
        assert section.size_in_bytes == HEADER_SIZE + len(section.records)
        part += expected
    # Every row is in exactly one section, partitions ascending.
    assert [p for p, _ in sections] == sorted(p for p, _ in sections)
    assert sum(len(v) for v in seen.values()) == len(rows)


def test_columnar_reader_reads_what_the_encoder_wrote() -> None:
    rng = random.Random(99)
    rows = random_rows(rng, 400)
    sections = encode_records(columns_of(rows), np.zeros(len(rows), np.int32), 8192)
    raw = bytearray()
    base = 0
    for _, section in sections:  # offsets as a log would assign them
        batch = bytearray(section.seal(compression=Compression.LZ4))
        batch[0:8] = base.to_bytes(8, "big")
        raw += batch
        base += section.count
    batch, position = decode_to_arrow(bytes(raw), "t", 0, 0, len(rows), True)
    assert position == len(rows)
    assert batch is not None
    assert batch.column("key").to_pylist() == [r[0] for r in rows]
    assert batch.column("value").to_pylist() == [r[1] for r in rows]
    assert batch.column("offset").to_pylist() == list(range(len(rows)))
    millis = batch.column("timestamp").cast(pa.int64()).to_pylist()
    assert [m // 1000 for m in millis] == [r[2] for r in rows]
    assert [[(h["key"], h["value"]) for h in hs] for hs in batch.column("headers").to_pylist()] \
        == [r[3] for r in rows]


def test_a_record_larger_than_the_limit_gets_a_section_of_its_own() -> None:
    rows: list[Row] = [(b"k", b"v" * 10, 5, []), (b"k", b"big" * 1000, 6, []),
                       (b"k", b"v", 7, []), (b"k", b"w", 3, [])]
    sections = encode_records(columns_of(rows), np.zeros(4, np.int32), 100)
    assert [s.count for _, s in sections] == [1, 1, 2]
    last = sections[-1][1]
    assert (last.base_timestamp, last.max_timestamp) == (7, 7)  # base = first, max = largest
    assert decoded(last.seal()) == rows[2:]


def test_partitions_keep_row_order_and_come_out_ascending() -> None:
    rows: list[Row] = [(f"k{i}".encode(), f"v{i}".encode(), i, []) for i in range(100)]
    partitions = np.array([(i * 7) % 5 for i in range(100)], dtype=np.int32)
    sections = encode_records(columns_of(rows), partitions, 10**6)
    assert [p for p, _ in sections] == [0, 1, 2, 3, 4]
    for partition, section in sections:
        assert decoded(section.seal()) == [rows[i] for i in range(100)
                                           if (i * 7) % 5 == partition]


def test_no_records_no_sections() -> None:
    assert encode_records(columns_of([]), np.zeros(0, np.int32), 100) == []


@pytest.mark.parametrize(("headers", "message"), [
    ([[None]], "a header is null"),
    ([[{"key": None, "value": b"x"}]], "header key is null"),
])
def test_null_header_or_header_key_is_refused(headers: Any, message: str) -> None:
    with pytest.raises(InvalidRecordColumnError, match=message):
        RecordColumns.of(pa.array([b"k"]), pa.array([b"v"]), np.zeros(1, np.int64),
                         pa.array(headers, HEADER_TYPE))


def test_packed_varints_are_leb128_of_zigzag() -> None:
    rng = np.random.default_rng(5)
    for trial in range(100):
        n = int(rng.integers(0, 40))
        values = [rng.integers(-2**int(rng.integers(1, 63)), 2**int(rng.integers(1, 63)), n)
                  for _ in range(int(rng.integers(1, 5)))]
        if n:
            values.append(np.array([-2**63, 2**63 - 1, 0, -1][:1] * n, dtype=np.int64))
        packed = pack_varints([Varints.of(v) for v in values], large=bool(trial % 2))
        expected = [b"".join(_varint(int(v[i])) for v in values) for i in range(n)]
        assert packed.to_pylist() == expected


def _varint(value: int) -> bytes:
    unsigned = (value << 1) ^ (value >> 63) if value < 0 else value << 1
    out = bytearray()
    while unsigned >= 0x80:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)
