from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.storage.files import CorruptIndexError
from strom.storage.offset_index import OffsetIndex
from strom.storage.time_index import TimeIndex

BASE = 1000


def test_offset_index_file_format_and_lookup(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    index = OffsetIndex.create(path, BASE, 1024)
    for rel, pos in [(3, 100), (9, 250), (20, 600)]:
        index.append(BASE + rel, pos)
    assert path.read_bytes() == b"" and index.pending_entries == 3  # written at flush
    index.flush()
    assert path.read_bytes() == struct.pack(">iiiiii", 3, 100, 9, 250, 20, 600)
    assert index.lookup(BASE) == (BASE, 0)
    assert index.lookup(BASE + 2) == (BASE, 0)
    assert index.lookup(BASE + 3) == (BASE + 3, 100)
    assert index.lookup(BASE + 19) == (BASE + 9, 250)
    assert index.lookup(BASE + 10**6) == (BASE + 20, 600)
    assert index.floor_position(249) == 100 and index.floor_position(99) == -1
    with pytest.raises(ValueError):
        index.append(BASE + 20, 700)  # offsets must grow
    index.truncate_to(BASE + 9)
    assert index.entries() == [(BASE + 3, 100)] and path.stat().st_size == 8
    index.close()
    loaded = OffsetIndex.load(path, BASE, 1024, segment_size=101)
    assert loaded.entries() == [(BASE + 3, 100)]
    loaded.close()
    assert OffsetIndex.create(path, BASE, 16).max_entries == 2


@pytest.mark.parametrize("data,size", [
    (b"\x00" * 7, 100),
    (struct.pack(">iiii", 5, 10, 4, 20), 100),  # offsets decrease
    (struct.pack(">iiii", 5, 10, 6, 10), 100),  # positions repeat
    (struct.pack(">ii", -1, 10), 100),
    (struct.pack(">ii", 1, 100), 100),  # position at the end of the segment
])
def test_offset_index_sanity_check(tmp_path: Path, data: bytes, size: int) -> None:
    path = tmp_path / "x.index"
    path.write_bytes(data)
    with pytest.raises(CorruptIndexError):
        OffsetIndex.load(path, BASE, 1024, segment_size=size)


@given(st.lists(st.tuples(st.integers(1, 50), st.integers(1, 500)), max_size=60),
       st.integers(-5, 3000))
def test_offset_index_lookup_matches_linear_search(
    steps: list[tuple[int, int]], target: int
) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        index = OffsetIndex.create(Path(d) / "i.index", BASE, 10**6)
        offset, position, entries = BASE, 0, []
        for doff, dpos in steps:
            offset += doff
            position += dpos
            index.append(offset, position)
            entries.append((offset, position))
        expected = max((e for e in entries if e[0] <= BASE + target), default=(BASE, 0))
        assert index.lookup(BASE + target) == expected
        index.close()


def test_time_index_format_lookup_and_truncate(tmp_path: Path) -> None:
    path = tmp_path / "x.timeindex"
    index = TimeIndex.create(path, BASE, 1200)
    assert index.maybe_append(100, BASE + 1)
    assert not index.maybe_append(100, BASE + 5)  # timestamps must grow
    assert index.maybe_append(300, BASE + 5)
    assert index.maybe_append(500, BASE + 5)
    index.flush()
    assert path.read_bytes() == struct.pack(">qiqiqi", 100, 1, 300, 5, 500, 5)
    assert index.lookup(99) is None
    assert index.lookup(300) == (300, BASE + 5)
    assert index.lookup(300, strict=True) == (100, BASE + 1)
    assert index.lookup(10**9) == (500, BASE + 5)
    assert index.max_entries == 100
    index.truncate_to(BASE + 5)
    assert index.entries() == [(100, BASE + 1)]
    index.close()
    assert TimeIndex.load(path, BASE, 1200).entries() == [(100, BASE + 1)]


@pytest.mark.parametrize("data", [
    b"\x00" * 13,
    struct.pack(">qiqi", 5, 1, 4, 2),  # timestamps decrease
    struct.pack(">qiqi", 5, 3, 6, 2),  # offsets decrease
])
def test_time_index_sanity_check(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "x.timeindex"
    path.write_bytes(data)
    with pytest.raises(CorruptIndexError):
        TimeIndex.load(path, BASE, 1200)
