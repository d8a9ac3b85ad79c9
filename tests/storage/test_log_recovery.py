from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from strom.protocol.records.batch import parse_header
from strom.storage import dump
from strom.storage.log import Log
from strom.storage.segment import LogSegment
from tests.storage.conftest import OpenLog
from tests.storage.helpers import batch_offsets, make_batch, payload, read_all, values

CONFIG = {"segment_bytes": 600, "index_interval_bytes": 80}


def fill(plog: Log, batches: int) -> list[tuple[int, int]]:
    for i in range(batches):
        plog.append(payload(make_batch(values(1 + i % 3, size=20))), leader_epoch=i // 10)
    return batch_offsets(read_all(plog))


def assert_sound(plog: Log) -> None:
    """Indexes agree with the data, and every offset translates to its batch."""
    for segment in plog.segments:
        assert dump.verify_offset_index(segment.log_path).ok
        assert dump.verify_time_index(segment.log_path).ok
        pos = 0
        for header in segment.headers():
            for offset in (header.base_offset, header.last_offset):
                found = segment.translate_offset(offset)
                assert found is not None and found[0] == pos
            pos += header.size
        assert pos == segment.size
        assert segment.next_offset == (header.next_offset if segment.size else segment.base_offset)
    assert plog.log_end_offset == plog.active_segment.next_offset


@pytest.fixture
def recoveries(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    original = LogSegment.recover

    def spy(self: LogSegment) -> object:
        calls.append(self.base_offset)
        return original(self)

    monkeypatch.setattr(LogSegment, "recover", spy)
    return calls


def test_reopen_after_clean_close_trusts_indexes(open_log: OpenLog, recoveries: list[int]) -> None:
    plog = open_log(**CONFIG)
    batches = fill(plog, 60)
    data = read_all(plog)
    plog.flush()
    plog.close()
    again = open_log(clean_shutdown=True, recovery_point=plog.log_end_offset, **CONFIG)
    assert recoveries == []
    assert read_all(again) == data and batch_offsets(read_all(again)) == batches
    assert again.log_end_offset == again.recovery_point == plog.log_end_offset
    assert again.leader_epochs.entries() == plog.leader_epochs.entries()
    assert_sound(again)
    assert again.append(payload(make_batch(values(1))), leader_epoch=9).base_offset == \
        plog.log_end_offset


def test_unclean_open_recovers_only_after_the_recovery_point(
    open_log: OpenLog, recoveries: list[int]
) -> None:
    plog = open_log(**CONFIG)
    fill(plog, 60)
    bases = [s.base_offset for s in plog.segments]
    recovery_point = bases[3] + 1
    again = open_log(recovery_point=recovery_point, **CONFIG)
    assert recoveries == bases[3:]
    assert again.recovery_point == again.log_end_offset  # recovered data is fsynced
    assert_sound(again)


def test_torn_tail_is_cut(open_log: OpenLog) -> None:
    plog = open_log(**CONFIG)
    batches = fill(plog, 40)
    active = plog.active_segment
    last_start = list(active.headers())[-1].position
    with open(active.log_path, "r+b") as f:
        f.truncate(last_start + 30)
    again = open_log(**CONFIG)
    assert batch_offsets(read_all(again)) == batches[:-1]
    assert again.log_end_offset == batches[-2][1] + 1
    assert os.path.getsize(active.log_path) == last_start
    assert_sound(again)


def test_corrupt_byte_in_tail_cuts_from_that_batch(open_log: OpenLog) -> None:
    plog = open_log(**CONFIG)
    batches = fill(plog, 40)
    headers = list(plog.active_segment.headers())
    victim = headers[-2]
    with open(plog.active_segment.log_path, "r+b") as f:
        f.seek(victim.position + victim.size - 3)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x55]))
    again = open_log(**CONFIG)
    assert batch_offsets(read_all(again)) == batches[:-2]
    assert_sound(again)
    again.append(payload(make_batch(values(1))), leader_epoch=7)
    assert batch_offsets(read_all(again))[-1] == (batches[-3][1] + 1,) * 2


def test_torn_middle_segment_drops_later_segments(open_log: OpenLog) -> None:
    plog = open_log(**CONFIG)
    fill(plog, 60)
    segments = plog.segments
    victim = segments[2]
    with open(victim.log_path, "r+b") as f:
        f.truncate(victim.size - 5)
    again = open_log(**CONFIG)
    assert [s.base_offset for s in again.segments] == [s.base_offset for s in segments[:3]]
    assert not segments[3].log_path.exists() and not segments[3].index_path.exists()
    assert_sound(again)


@pytest.mark.parametrize("how", ["delete", "garbage", "odd-size", "unsorted", "mid-batch",
                                 "beyond-end", "time-delete", "time-future"])
def test_bad_index_is_rebuilt_even_after_clean_shutdown(
    open_log: OpenLog, recoveries: list[int], how: str
) -> None:
    plog = open_log(**CONFIG)
    fill(plog, 60)
    data = read_all(plog)
    plog.close()
    segment = plog.segments[1]
    index = segment.index_path
    entries = dump.offset_index_entries(index)
    assert len(entries) >= 2
    raw = index.read_bytes()
    if how == "delete":
        index.unlink()
    elif how == "garbage":
        index.write_bytes(b"\xff" * len(raw))
    elif how == "odd-size":
        index.write_bytes(raw + b"\x00")
    elif how == "unsorted":
        index.write_bytes(raw[8:16] + raw[0:8] + raw[16:])
    elif how == "mid-batch":  # the last entry points one byte after its batch start
        pos = int.from_bytes(raw[-4:], "big") + 1
        index.write_bytes(raw[:-4] + pos.to_bytes(4, "big"))
    elif how == "beyond-end":
        index.write_bytes(raw[:-4] + (segment.size + 10).to_bytes(4, "big"))
    elif how == "time-delete":
        segment.time_index_path.unlink()
    elif how == "time-future":  # an entry for an offset the segment does not hold
        traw = segment.time_index_path.read_bytes()
        rel = segment.next_offset - segment.base_offset + 5
        segment.time_index_path.write_bytes(
            traw + (2**40).to_bytes(8, "big") + rel.to_bytes(4, "big"))
    again = open_log(clean_shutdown=True, **CONFIG)
    assert recoveries == [segment.base_offset]
    assert read_all(again) == data
    assert again.leader_epochs.entries() == plog.leader_epochs.entries()
    assert dump.offset_index_entries(index) == entries
    assert_sound(again)


def test_recovery_rebuilds_identical_indexes(open_log: OpenLog) -> None:
    plog = open_log(**CONFIG)
    fill(plog, 60)
    plog.close()
    before = {p.name: p.read_bytes() for p in plog.directory.iterdir()
              if p.suffix in (".index", ".timeindex")}
    for name in before:
        (plog.directory / name).unlink()
    open_log(**CONFIG).close()
    after = {p.name: p.read_bytes() for p in plog.directory.iterdir()
             if p.suffix in (".index", ".timeindex")}
    assert after == before


def test_leader_epoch_checkpoint_ahead_of_log_is_trimmed(open_log: OpenLog) -> None:
    plog = open_log(**CONFIG)
    fill(plog, 25)  # epochs 0, 1, 2 start at batch 0, 10, 20
    entries = plog.leader_epochs.entries()
    assert [e for e, _ in entries] == [0, 1, 2]
    # Lose everything from epoch 2 on, as if the crash came before those writes hit the disk.
    cut = entries[2][1]
    for segment in plog.segments:
        if segment.base_offset > cut:
            segment.unlink()
            continue
        found = segment.translate_offset(cut)
        if found is not None:
            with open(segment.log_path, "r+b") as f:
                f.truncate(found[0])
    again = open_log(**CONFIG)
    assert again.log_end_offset == cut
    assert again.leader_epochs.entries() == entries[:2]


def test_lost_epoch_checkpoint_is_rebuilt_by_recovery(open_log: OpenLog) -> None:
    plog = open_log(**CONFIG)
    fill(plog, 35)
    entries = plog.leader_epochs.entries()
    assert len(entries) == 4
    plog.close()
    (plog.directory / "leader-epoch-checkpoint").unlink()
    again = open_log(**CONFIG)
    assert again.leader_epochs.entries() == entries


def test_log_start_above_surviving_data_starts_over(open_log: OpenLog) -> None:
    plog = open_log(**CONFIG)
    fill(plog, 10)
    end = plog.log_end_offset
    plog.close()
    again = open_log(log_start_offset=end + 5, **CONFIG)
    assert again.log_start_offset == again.log_end_offset == end + 5


def test_kill_9_loses_nothing_written(tmp_path: Path, open_log: OpenLog) -> None:
    directory = tmp_path / "crash-0"
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from strom.common.clock import SYSTEM_CLOCK
        from strom.storage.log import Log
        from tests.storage.helpers import make_batch, payload, topic_config, values
        plog = Log.open({str(directory)!r}
                        and __import__("pathlib").Path({str(directory)!r}),
                        topic_config(segment_bytes=2000, index_interval_bytes=100),
                        clock=SYSTEM_CLOCK)
        for i in range(200):
            plog.append(payload(make_batch(values(3), base_offset=0)), leader_epoch=1)
        print(plog.log_end_offset, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert int(proc.stdout) == 600
    again = open_log(directory=directory, segment_bytes=2000, index_interval_bytes=100)
    assert again.log_end_offset == 600
    offsets = batch_offsets(read_all(again))
    assert offsets == [(i * 3, i * 3 + 2) for i in range(200)]
    assert_sound(again)


def test_header_positions_match_files(open_log: OpenLog) -> None:
    plog = open_log(**CONFIG)
    fill(plog, 5)
    data = plog.active_segment.log_path.read_bytes()
    for header in plog.active_segment.headers():
        assert parse_header(data, header.position).base_offset == header.base_offset
