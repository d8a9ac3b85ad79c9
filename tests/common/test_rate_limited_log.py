"""RateLimitedLog: a burst per window, then counted; the count rides on the next record."""

from __future__ import annotations

import logging

import pytest

from strom.common.rate_limited_log import RateLimitedLog


def test_burst_then_suppressed_then_reported(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    limited = RateLimitedLog(logging.getLogger("t.rate"), logging.WARNING, burst=3,
                             interval_s=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="t.rate"):
        written = [limited.log("closing %s", i) for i in range(50)]
        assert written == [True] * 3 + [False] * 47
        assert limited.suppressed == 47
        now[0] = 9.9
        assert not limited.log("closing %s", 50)
        now[0] = 10.0
        assert limited.log("closing %s", 51)
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["closing 0", "closing 1", "closing 2",
                        "closing 51 (48 similar messages suppressed)"]
    assert limited.suppressed == 0


def test_traceback_is_kept(caplog: pytest.LogCaptureFixture) -> None:
    limited = RateLimitedLog(logging.getLogger("t.rate2"), logging.ERROR)
    with caplog.at_level(logging.ERROR, logger="t.rate2"):
        limited.log("failed", exc_info=ValueError("boom"))
    assert caplog.records[0].exc_info is not None
