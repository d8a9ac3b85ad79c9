"""LogDirHealth: one report per failure episode, the client error, recovery."""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import pytest

from strom.common.errors import ErrorCode
from strom.storage.health import LogDirHealth


def test_failures_reported_once_per_episode(tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    health = LogDirHealth(tmp_path)
    full = OSError(errno.ENOSPC, "No space left on device")
    with caplog.at_level(logging.DEBUG, logger="strom.storage"):
        errors = [health.failure(full, f"appending to t-{i}") for i in range(50)]
        assert health.failing and health.failures == 50
        health.succeeded()
        health.succeeded()
        health.failure(full, "appending to t-0")  # a new episode within the report interval
    assert {e.code for e in errors} == {ErrorCode.KAFKA_STORAGE_ERROR}  # type: ignore[attr-defined]
    assert errors[0].message == (
        "log directory error while appending to t-0: No space left on device")
    by_level = [(r.levelno, r.getMessage().split(":")[0]) for r in caplog.records
                if r.levelno > logging.DEBUG]
    assert by_level == [
        (logging.ERROR, f"log directory {tmp_path} is failing"),
        (logging.WARNING, f"log directory {tmp_path} accepts writes again (50 failed writes)")]
