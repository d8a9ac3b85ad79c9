"""FixedEntryIndex, the base of the segment indexes: file mechanics with a toy subclass, and the
byte-exact formats of the two real indexes built on it."""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.storage.files import CorruptIndexError
from strom.storage.index_base import Columns, FixedEntryIndex, check_non_decreasing
from strom.storage.offset_index import OffsetIndex
from strom.storage.time_index import TimeIndex

BASE = 1000


class MarkerIndex(FixedEntryIndex):
    """A third index shaped like Kafka's ``.txnindex`` (mixed widths, absolute offsets):
    int16 version, int64 producer id, int64 last offset."""

    ENTRY: ClassVar[struct.Struct] = struct.Struct(">hqq")
    TYPECODES: ClassVar[str] = "hqq"
    OFFSET_FIELD: ClassVar[int] = 2

    __slots__ = ()

    @classmethod
    def load(cls, path: Path) -> MarkerIndex:
        def check(columns: Columns) -> None:
            check_non_decreasing(path, "last offsets", columns[2])

        return cls._load(path, BASE, 10**6, check)

    def _stored_offset(self, offset: int) -> int:
        return offset  # absolute

    def append(self, producer_id: int, last_offset: int) -> None:
        self._append_entry(0, producer_id, last_offset)

    def rows(self) -> list[tuple[int, ...]]:
        return list(zip(*self._columns, strict=True))


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_mixed_width_entries_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "x.marker"
    index = MarkerIndex.create(path, BASE, 10**6)
    index.append(7, BASE + 5)
    index.append(8, BASE + 9)
    index.flush()
    assert path.read_bytes() == struct.pack(">hqqhqq", 0, 7, BASE + 5, 0, 8, BASE + 9)
    assert len(index) == 2 and index.size_in_bytes == 36 == path.stat().st_size
    index.close()
    index.close()  # idempotent
    index.flush()  # after close: nothing to do
    loaded = MarkerIndex.load(path)
    assert loaded.rows() == [(0, 7, BASE + 5), (0, 8, BASE + 9)]
    # truncate_to cuts on OFFSET_FIELD through _stored_offset (absolute here)
    loaded.truncate_to(BASE + 9)
    assert loaded.rows() == [(0, 7, BASE + 5)] and path.stat().st_size == 18
    loaded.truncate_to(BASE + 100)  # nothing at or past it: unchanged
    assert len(loaded) == 1
    loaded.truncate_to(0)
    assert len(loaded) == 0 and path.stat().st_size == 0
    loaded.close()


def test_replace_entries_rewrites_file_and_memory(tmp_path: Path) -> None:
    path = tmp_path / "x.marker"
    index = MarkerIndex.create(path, BASE, 10**6)
    for i in range(5):
        index.append(i, BASE + i)
    index._replace_entries([(1, 42, BASE + 3)])
    assert index.rows() == [(1, 42, BASE + 3)]
    assert path.read_bytes() == struct.pack(">hqq", 1, 42, BASE + 3)
    index.append(43, BASE + 4)  # appends continue after the rewritten entries
    index.flush()
    assert path.stat().st_size == 2 * MarkerIndex.ENTRY.size
    index.close()


def test_load_checks_size_and_subclass_rules_and_closes_on_failure(tmp_path: Path) -> None:
    path = tmp_path / "x.marker"
    before = _open_fds()
    path.write_bytes(b"\x00" * 19)  # not a multiple of 18
    with pytest.raises(CorruptIndexError, match="multiple of 18"):
        MarkerIndex.load(path)
    path.write_bytes(struct.pack(">hqqhqq", 0, 1, 9, 0, 2, 8))  # last offsets decrease
    with pytest.raises(CorruptIndexError, match="decrease"):
        MarkerIndex.load(path)
    with pytest.raises(FileNotFoundError):
        MarkerIndex.load(tmp_path / "missing")
    assert _open_fds() == before


def test_create_empties_an_existing_file_and_max_entries(tmp_path: Path) -> None:
    path = tmp_path / "x.marker"
    path.write_bytes(b"junk" * 10)
    index = MarkerIndex.create(path, BASE, 40)
    assert len(index) == 0 and path.stat().st_size == 0
    assert index.max_entries == 2 and not index.is_full
    index.append(1, 1)
    index.append(2, 2)
    assert index.is_full
    index.append(3, 3)  # a soft limit
    assert len(index) == 3
    index.close()
    assert MarkerIndex.create(path, BASE, 0).max_entries == 1


def test_raw_entries_and_decode_columns_ignore_a_partial_tail() -> None:
    data = struct.pack(">iiii", 1, 10, 2, 20) + b"\x01\x02"
    assert OffsetIndex.raw_entries(data) == [(1, 10), (2, 20)]
    assert [c.tolist() for c in OffsetIndex.decode_columns(data)] == [[1, 2], [10, 20]]
    data = struct.pack(">qiqi", -5, 1, 2**40, 3) + b"\x00" * 11
    assert TimeIndex.raw_entries(data) == [(-5, 1), (2**40, 3)]
    assert [c.tolist() for c in TimeIndex.decode_columns(data)] == [[-5, 2**40], [1, 3]]


def test_a_subclass_whose_typecodes_do_not_match_its_entry_is_refused() -> None:
    with pytest.raises(TypeError, match="TYPECODES"):

        class Bad(FixedEntryIndex):
            ENTRY: ClassVar[struct.Struct] = struct.Struct(">qi")
            TYPECODES: ClassVar[str] = "ii"
            OFFSET_FIELD: ClassVar[int] = 1

    with pytest.raises(TypeError, match="OFFSET_FIELD"):

        class Bad2(FixedEntryIndex):
            ENTRY: ClassVar[struct.Struct] = struct.Struct(">qi")
            TYPECODES: ClassVar[str] = "qi"
            OFFSET_FIELD: ClassVar[int] = 2


def _cumulative(steps: list[tuple[int, int]], start: int) -> list[tuple[int, int]]:
    """Running sums: strictly increasing relative offsets and second fields."""
    rel, other, out = 0, start, []
    for d_rel, d_other in steps:
        rel, other = rel + d_rel, other + d_other
        out.append((rel, other))
    return out


def _open_filled(kind: str, path: Path, rows: list[tuple[int, int]]) -> OffsetIndex | TimeIndex:
    """A new index of ``kind`` holding ``rows`` (relative offset, position or timestamp)."""
    if kind == "index":
        oindex = OffsetIndex.create(path, BASE, 10**6)
        for rel, position in rows:
            oindex.append(BASE + rel, position)
        return oindex
    tindex = TimeIndex.create(path, BASE, 10**6)
    for rel, timestamp in rows:
        assert tindex.maybe_append(timestamp, BASE + rel)
    return tindex


def _kafka_bytes(kind: str, rows: list[tuple[int, int]]) -> bytes:
    if kind == "index":  # int32 relative offset, int32 position
        return b"".join(struct.pack(">ii", rel, pos) for rel, pos in rows)
    return b"".join(struct.pack(">qi", ts, rel) for rel, ts in rows)  # int64 ts, int32 rel


@pytest.mark.parametrize("kind", ["index", "timeindex"])
@given(steps=st.lists(st.tuples(st.integers(1, 50), st.integers(1, 500)), max_size=40),
       cut=st.integers(-5, 2500))
def test_bytes_are_kafkas_and_survive_load_truncate_and_rebuild(
    kind: str, steps: list[tuple[int, int]], cut: int
) -> None:
    rows = _cumulative(steps, 0 if kind == "index" else 1_700_000_000_000)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"i.{kind}"
        index = _open_filled(kind, path, rows)
        entries = index.entries()
        index.flush()
        assert path.read_bytes() == _kafka_bytes(kind, rows)
        index.close()
        if kind == "index":
            loaded: OffsetIndex | TimeIndex = OffsetIndex.load(
                path, BASE, 10**6, segment_size=(rows[-1][1] + 1 if rows else 0))
        else:
            loaded = TimeIndex.load(path, BASE, 10**6)
        assert loaded.entries() == entries
        loaded.truncate_to(BASE + cut)
        kept = [row for row in rows if row[0] < cut]
        assert path.read_bytes() == _kafka_bytes(kind, kept)
        assert len(loaded) == len(kept)
        loaded.replace_all(entries)
        assert path.read_bytes() == _kafka_bytes(kind, rows) and loaded.entries() == entries
        loaded.close()
