"""The log maker process: what it makes, what it leaves when it cannot, and its failures."""

from __future__ import annotations

import errno
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.storage import partition_metadata
from strom.storage.log import new_log_files_item, open_made_log_file
from strom.storage.log_maker import LogMaker, LogMakerGone

TOPIC_ID = uuid.UUID(int=42)


@pytest.fixture
def maker() -> Iterator[LogMaker]:
    made = LogMaker()
    yield made
    made.close()


def test_new_logs_are_made_with_their_topic_id_and_an_empty_first_segment(
        tmp_path: Path, maker: LogMaker) -> None:
    items = [new_log_files_item(tmp_path / f"t-{p}", TOPIC_ID, 0) for p in range(50)]
    items.append(new_log_files_item(tmp_path / "u-0", None, 7))
    assert maker.make(items) == [None] * 51
    for p in range(50):
        assert partition_metadata.read_topic_id(tmp_path / f"t-{p}") == TOPIC_ID
        assert sorted(f.name for f in (tmp_path / f"t-{p}").iterdir()) == [
            "00000000000000000000.log", "partition.metadata"]
    assert [f.name for f in (tmp_path / "u-0").iterdir()] == ["00000000000000000007.log"]
    with open_made_log_file(tmp_path / "u-0", 7) as log_file:  # open read-write, empty
        assert log_file.readable() and log_file.writable() and log_file.read() == b""


def test_a_directory_already_there_is_left_as_it_is(tmp_path: Path, maker: LogMaker) -> None:
    (tmp_path / "t-0").mkdir()
    (tmp_path / "t-0" / "keep").write_bytes(b"x")
    outcomes = maker.make([new_log_files_item(tmp_path / "t-0", TOPIC_ID, 0),
                           new_log_files_item(tmp_path / "t-1", TOPIC_ID, 0)])
    assert outcomes == [False, None]
    assert [f.name for f in (tmp_path / "t-0").iterdir()] == ["keep"]


def test_a_log_that_cannot_be_made_leaves_nothing_and_the_others_are_made(
        tmp_path: Path, maker: LogMaker) -> None:
    """All or nothing per log: a file that cannot be made removes what was made of it."""
    directory, meta_name, meta, _ = new_log_files_item(tmp_path / "t-0", TOPIC_ID, 0)
    broken = (directory, meta_name, meta, "missing/00000000000000000000.log")
    outcomes = maker.make([broken, new_log_files_item(tmp_path / "nowhere" / "t-1",
                                                      TOPIC_ID, 0),
                           new_log_files_item(tmp_path / "t-2", TOPIC_ID, 0)])
    assert isinstance(outcomes[0], OSError) and outcomes[0].errno == errno.ENOENT
    assert isinstance(outcomes[1], OSError) and outcomes[1].errno == errno.ENOENT
    assert outcomes[2] is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t-2"]


def test_a_helper_that_died_or_a_closed_maker_raises_log_maker_gone(
        tmp_path: Path, maker: LogMaker) -> None:
    assert maker.make([new_log_files_item(tmp_path / "t-0", TOPIC_ID, 0)]) == [None]
    process = maker._process
    assert process is not None
    process.kill()
    process.wait()
    with pytest.raises(LogMakerGone):
        maker.make([new_log_files_item(tmp_path / "t-1", TOPIC_ID, 0)])
    # a new helper is started for the next request
    assert maker.make([new_log_files_item(tmp_path / "t-2", TOPIC_ID, 0)]) == [None]
    maker.close()
    with pytest.raises(LogMakerGone):
        maker.make([new_log_files_item(tmp_path / "t-3", TOPIC_ID, 0)])


def test_the_helper_exits_when_the_maker_closes(tmp_path: Path) -> None:
    maker = LogMaker()
    maker.make([new_log_files_item(tmp_path / "t-0", TOPIC_ID, 0)])
    process = maker._process
    assert process is not None and process.poll() is None
    maker.close()
    assert process.wait(10) == 0
