"""Fixtures for storage tests: a manual clock and an opener for small-config logs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from strom.common.clock import ManualClock
from strom.storage.log import Log
from tests.storage.helpers import NOW, topic_config

OpenLog = Callable[..., Log]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


@pytest.fixture
def open_log(tmp_path: Path, clock: ManualClock) -> Iterator[OpenLog]:
    """``open_log(**topic_overrides)`` -> a Log in tmp_path/topic-0 (underscores become dots)."""
    opened: list[Log] = []

    def opener(*, directory: Path | None = None, clean_shutdown: bool = False,
               recovery_point: int = 0, log_start_offset: int = 0, **overrides: object) -> Log:
        plog = Log.open(directory or tmp_path / "topic-0", topic_config(**overrides), clock=clock,
                        recovery_point=recovery_point, log_start_offset=log_start_offset,
                        clean_shutdown=clean_shutdown)
        opened.append(plog)
        return plog

    yield opener
    for plog in opened:
        if not plog.closed:
            plog.close()
