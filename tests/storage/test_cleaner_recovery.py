"""Crashes in the middle of a cleaner swap: leftover .cleaned / .swap files at load."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from strom.common.clock import ManualClock
from strom.storage.log import Log
from strom.storage.segment import LogSegment
from tests.storage.cleaner_helpers import (
    as_tuples,
    expected_after_cleaning,
    log_records,
    one_log_cleaner,
    produce,
)
from tests.storage.conftest import OpenLog
from tests.storage.helpers import make_batch, payload

COMPACT = {"cleanup_policy": "compact", "min_cleanable_dirty_ratio": "0.01",
           "segment_bytes": 400}


class Crash(BaseException):  # not caught by the cleaner, like a real crash
    pass


def _fill(plog: Log) -> None:
    for i in range(60):
        produce(plog, [(b"k%d" % (i % 4), b"value-%d" % i)])
    produce(plog, [(b"tail", b"t")])  # the active segment


def _crash_at_swap(
    tmp_path: Path, open_log: OpenLog, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, list[tuple[int, int, bytes | None, bytes | None]], list[int], list[int], Path]:
    """Clean twice, "crashing" in the second pass when the first group's ``.swap`` files
    are ready (step 2 of :mod:`strom.storage.swap` done). The first pass shrank the
    segments, so the second one groups several of them.

    Returns the log directory, the expected content after a completed swap, the original
    segment bases, the bases the first group replaces, and a copy of its ``.swap`` files."""
    plog = open_log(**COMPACT)
    _fill(plog)
    assert one_log_cleaner(tmp_path, plog, clock).clean_once()  # small cleaned segments
    _fill(plog)
    produced = log_records(plog)
    bases = [s.base_offset for s in plog.segments]
    saved = tmp_path / "saved-swap"
    saved.mkdir()
    group: list[int] = []

    def crash(self: Log, old: list[LogSegment], base: int, generation: int) -> None:
        for path in self.directory.glob("*.swap"):
            shutil.copy(path, saved / path.name)
        group.extend(s.base_offset for s in old)
        raise Crash

    monkeypatch.setattr(Log, "replace_segments", crash)
    cleaner = one_log_cleaner(tmp_path, plog, clock)
    with pytest.raises(Crash):
        cleaner.clean_once()
    monkeypatch.undo()
    directory = plog.directory
    plog.close()
    assert len(group) > 1
    # Completing only that group's swap leaves, inside the group's range, the latest
    # record per key of the whole dirty section; everything after it untouched.
    clean_end = bases[-1]
    expected_full = expected_after_cleaning(produced, clean_end)
    group_end = bases[len(group)]
    expected = [r for r in as_tuples(produced)
                if not (r[0] < group_end and r not in expected_full)]
    return directory, expected, bases, group, saved


def _restore(saved: Path, directory: Path) -> None:
    for path in saved.iterdir():
        shutil.copy(path, directory / path.name)


@pytest.mark.parametrize("stage", ["swap-ready", "old-partly-unlinked", "indexes-renamed",
                                   "log-renamed-unlinks-lost"])
def test_interrupted_swap_is_completed_at_load(
    tmp_path: Path, open_log: OpenLog, clock: ManualClock, monkeypatch: pytest.MonkeyPatch,
    stage: str,
) -> None:
    directory, expected, bases, group, saved = _crash_at_swap(tmp_path, open_log, clock,
                                                              monkeypatch)
    _restore(saved, directory)
    first = f"{group[0]:020d}"
    if stage == "old-partly-unlinked":
        for base in group[1:3]:
            for suffix in (".log", ".index", ".timeindex"):
                (directory / f"{base:020d}{suffix}").unlink()
    elif stage == "indexes-renamed":
        for base in group[1:]:
            for suffix in (".log", ".index", ".timeindex"):
                (directory / f"{base:020d}{suffix}").unlink()
        for suffix in (".index", ".timeindex"):
            os.replace(directory / f"{first}{suffix}.swap", directory / f"{first}{suffix}")
    elif stage == "log-renamed-unlinks-lost":
        # Every rename reached the disk but not the unlinks of the other old segments.
        for suffix in (".index", ".timeindex", ".log"):
            os.replace(directory / f"{first}{suffix}.swap", directory / f"{first}{suffix}")
    for clean in (False, True):
        plog = open_log(directory=directory, clean_shutdown=clean, **COMPACT)
        assert as_tuples(log_records(plog)) == expected
        assert not list(directory.glob("*.swap")) and not list(directory.glob("*.cleaned"))
        remaining = [s.base_offset for s in plog.segments]
        assert remaining == [group[0], *bases[len(group):]]
        plog.append(payload(make_batch([b"v"], keys=[b"k"])), leader_epoch=0)  # usable
        expected = as_tuples(log_records(plog))
        plog.close()


def test_leftover_cleaned_files_are_discarded(
    tmp_path: Path, open_log: OpenLog, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory, _, bases, group, saved = _crash_at_swap(tmp_path, open_log, clock, monkeypatch)
    plog = open_log(directory=directory, clean_shutdown=True, **COMPACT)
    original = as_tuples(log_records(plog))
    plog.close()
    for path in saved.iterdir():  # the crash came before the rename to .swap
        target = directory / path.name.replace(".swap", ".cleaned")
        shutil.copy(path, target)
    (directory / f"{group[0]:020d}.index.swap").write_bytes(b"")  # an orphan index swap
    plog = open_log(directory=directory, **COMPACT)
    assert as_tuples(log_records(plog)) == original
    assert [s.base_offset for s in plog.segments] == bases
    assert not list(directory.glob("*.cleaned")) and not list(directory.glob("*.swap"))


def test_failed_swap_leaves_no_files_and_the_log_untouched(
    tmp_path: Path, open_log: OpenLog, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    plog = open_log(**COMPACT)
    _fill(plog)
    before = as_tuples(log_records(plog))
    plog.truncate_to(plog.log_end_offset)  # no-op; the generation only moves on real cuts
    real = Log.replace_segments

    def truncate_first(self: Log, old: list[LogSegment], base: int, generation: int) -> None:
        self.truncate_to(self.log_end_offset - 1)  # a concurrent truncation
        return real(self, old, base, generation)  # type: ignore[return-value]

    monkeypatch.setattr(Log, "replace_segments", truncate_first)
    cleaner = one_log_cleaner(tmp_path, plog, clock)
    assert not cleaner.clean_once()
    assert cleaner.stats().passes_aborted == 1
    assert as_tuples(log_records(plog)) == before[:-1]
    assert not list(plog.directory.glob("*.swap")) and not list(plog.directory.glob("*.cleaned"))
