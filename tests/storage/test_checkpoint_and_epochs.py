from __future__ import annotations

from pathlib import Path

import pytest

from strom.common.types import TopicPartition
from strom.storage import leader_epoch
from strom.storage.checkpoint import read_checkpoint, read_offsets, write_offsets
from strom.storage.files import CorruptFileError
from strom.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT, LeaderEpochCache
from tests.storage.conftest import OpenLog
from tests.storage.helpers import make_batch


def test_offset_checkpoint_format_and_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    offsets = {TopicPartition("b-topic", 1): 42, TopicPartition("a.x-y", 0): 0,
               TopicPartition("a.x-y", 10): 2**40}
    write_offsets(path, offsets)
    assert path.read_text() == "0\n3\na.x-y 0 0\na.x-y 10 1099511627776\nb-topic 1 42\n"
    assert read_offsets(path) == offsets
    assert not list(tmp_path.glob("*.tmp"))
    assert read_offsets(tmp_path / "missing") == {}
    write_offsets(path, {})
    assert path.read_text() == "0\n0\n" and read_offsets(path) == {}


@pytest.mark.parametrize("text", ["", "1\n0\n", "0\n2\na 0 1\n", "0\n1\na 0\n", "0\n1\na x 1\n",
                                  "0\nz\n"])
def test_bad_checkpoints_are_rejected(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CorruptFileError):
        read_offsets(path)


def test_leader_epoch_cache(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    assert cache.latest_epoch == -1 and cache.end_offset_for_epoch(0, 10) == (-1, -1)
    assert cache.assign(1, 0)
    assert not cache.assign(1, 5)  # same epoch, later offset: nothing new
    assert cache.assign(3, 10)
    assert cache.assign(4, 20)
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n3\n1 0\n3 10\n4 20\n"
    assert read_checkpoint(tmp_path / LEADER_EPOCH_CHECKPOINT, 2) == [["1", "0"], ["3", "10"],
                                                                       ["4", "20"]]
    # OffsetForLeaderEpoch semantics.
    assert cache.end_offset_for_epoch(4, 30) == (4, 30)
    assert cache.end_offset_for_epoch(3, 30) == (3, 20)
    assert cache.end_offset_for_epoch(2, 30) == (1, 10)  # unknown epoch: the one below it
    assert cache.end_offset_for_epoch(0, 30) == (0, 0)  # below every epoch
    assert cache.end_offset_for_epoch(5, 30) == (-1, -1)
    assert cache.epoch_for_offset(15) == 3
    # Reload from the file.
    assert LeaderEpochCache(tmp_path).entries() == [(1, 0), (3, 10), (4, 20)]
    # Truncations.
    cache.truncate_from_end(20)
    assert cache.entries() == [(1, 0), (3, 10)]
    cache.truncate_from_start(12)
    assert cache.entries() == [(3, 12)]
    assert LeaderEpochCache(tmp_path).entries() == [(3, 12)]
    # A lower epoch (or earlier offset) replaces the entries it contradicts.
    cache.assign(5, 30)
    cache.assign(4, 25)
    assert cache.entries() == [(3, 12), (4, 25)]
    cache.clear()
    assert LeaderEpochCache(tmp_path).entries() == []


def test_corrupt_epoch_checkpoint_is_ignored(tmp_path: Path) -> None:
    (tmp_path / LEADER_EPOCH_CHECKPOINT).write_text("0\n1\nnot numbers\n")
    assert LeaderEpochCache(tmp_path).entries() == []


def test_a_failed_epoch_checkpoint_is_rewritten_before_the_next_append(
        tmp_path: Path, open_log: OpenLog, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk when leadership starts: the epoch stays in memory, marked dirty, and the
    log's next append writes the file first (refused while the disk is full), so no batch is
    ever appended ahead of the checkpoint."""
    plog = open_log()

    def full(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(leader_epoch, "write_checkpoint", full)
    with pytest.raises(OSError):
        plog.leader_epochs.assign(3, 0)
    assert plog.leader_epochs.dirty and plog.leader_epochs.latest_epoch == 3
    with pytest.raises(OSError):
        plog.append(memoryview(make_batch([b"a"])), leader_epoch=3)
    assert plog.log_end_offset == 0
    monkeypatch.undo()
    plog.append(memoryview(make_batch([b"a"])), leader_epoch=3)
    assert not plog.leader_epochs.dirty
    assert read_checkpoint(tmp_path / "topic-0" / LEADER_EPOCH_CHECKPOINT, 2) == [["3", "0"]]
