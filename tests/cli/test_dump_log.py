"""``strom dump-log`` on hand-built segment and index files."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from strom.protocol.records.builder import BatchBuilder
from tests.cli.conftest import Result

NAME = "00000000000000000100"


def _batch(base: int, values: list[bytes], ts: int, codec: int = 0, pid: int = -1) -> bytes:
    builder = BatchBuilder(base_offset=base, compression=codec, partition_leader_epoch=3,
                           producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                           base_sequence=0 if pid >= 0 else -1)
    for i, value in enumerate(values):
        builder.append(ts + i, b"key%d" % i, value, [("h", b"v")])
    return builder.build()


@pytest.fixture
def partition_dir(tmp_path: Path) -> Path:
    first = _batch(100, [b"a", b"b"], 1000)
    second = _batch(102, [b"c"], 2000, codec=1, pid=7)
    third = _batch(103, [b"d\nline"], 3000)
    (tmp_path / f"{NAME}.log").write_bytes(first + second + third)
    positions = [0, len(first), len(first) + len(second)]
    (tmp_path / f"{NAME}.index").write_bytes(
        struct.pack(">ii", 101 - 100, positions[0]) + struct.pack(">ii", 103 - 100, positions[2])
    )
    (tmp_path / f"{NAME}.timeindex").write_bytes(struct.pack(">qi", 1001, 1)
                                                  + struct.pack(">qi", 3000, 3))
    return tmp_path


def test_dump_segment_batches(cli: Callable[..., Result], partition_dir: Path) -> None:
    result = cli("dump-log", str(partition_dir / f"{NAME}.log"))
    assert result.code == 0, result.out + result.err
    lines = result.out.splitlines()
    assert lines[1] == "Log starting offset: 100"
    assert lines[2].startswith("baseOffset: 100 lastOffset: 101 count: 2 baseSequence: -1")
    assert "partitionLeaderEpoch: 3" in lines[2] and "position: 0 " in lines[2]
    assert "baseTimestamp: 1000 CreateTime: 1001" in lines[2] and "crcValid: true" in lines[2]
    assert "producerId: 7 producerEpoch: 0" in lines[3] and "compresscodec: gzip" in lines[3]
    assert "Summary: 3 batches, 4 records" in result.out


def test_dump_records_and_verify_indexes(cli: Callable[..., Result],
                                         partition_dir: Path) -> None:
    result = cli("dump-log", str(partition_dir), "--records", "--verify-index")
    assert result.code == 0, result.out
    assert ("| offset: 100 CreateTime: 1000 keySize: 4 valueSize: 1 sequence: -1 "
            "headerKeys: [h] key: key0 payload: a") in result.out
    assert "| offset: 102 CreateTime: 2000" in result.out and "sequence: 0" in result.out
    assert "payload: d\\nline" in result.out
    assert f"Index {NAME}.index: 2 entries, OK" in result.out
    assert f"Index {NAME}.timeindex: 2 entries, OK" in result.out


def test_dump_index_files(cli: Callable[..., Result], partition_dir: Path) -> None:
    result = cli("dump-log", str(partition_dir / f"{NAME}.index"),
                 str(partition_dir / f"{NAME}.timeindex"))
    assert result.code == 0
    assert "offset: 101 position: 0" in result.out
    assert "timestamp: 3000 offset: 103" in result.out


def test_corruption_is_reported(cli: Callable[..., Result], partition_dir: Path) -> None:
    log = partition_dir / f"{NAME}.log"
    data = bytearray(log.read_bytes())
    data[-3] ^= 0xFF  # inside the last batch's records: CRC mismatch
    log.write_bytes(bytes(data))
    (partition_dir / f"{NAME}.index").write_bytes(struct.pack(">ii", 1, 5))
    result = cli("dump-log", str(log), "--verify-index")
    assert result.code == 1
    assert "crcValid: false" in result.out
    assert "PROBLEM: CRC mismatch" in result.out
    assert "is not a batch start" in result.out


def test_bad_paths(cli: Callable[..., Result], tmp_path: Path) -> None:
    missing = cli("dump-log", str(tmp_path / "nope.log"))
    assert missing.code == 1 and "no such file or directory" in missing.err
    other = tmp_path / "notes.txt"
    other.write_text("x")
    wrong = cli("dump-log", str(other))
    assert wrong.code == 1 and "not a .log" in wrong.err
    empty = cli("dump-log", str(tmp_path))
    assert empty.code == 1 and "no .log segment files" in empty.err
