"""Throughput and latency bookkeeping for ``strom perf`` (kafka-producer-perf-test's Stats).

Latencies are kept in a sample of at most ``max_samples`` values (every k-th record, k chosen
from the expected count) so that percentiles stay cheap for any run length. Windows give the
periodic progress lines; the totals give the final summary.
"""

from __future__ import annotations

import math
import time
from array import array
from dataclasses import dataclass

MB = 1024 * 1024


def percentile(sorted_values: array | list[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values (0 when empty)."""
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, math.ceil(fraction * len(sorted_values)) - 1))
    return float(sorted_values[index])


@dataclass(slots=True)
class Window:
    """Counters since the last progress line."""

    start: float
    count: int = 0
    bytes: int = 0
    latency_sum: float = 0.0
    latency_max: float = 0.0


class Stats:
    """Counts records, bytes and latencies (ms); not thread-safe (one event loop uses it)."""

    def __init__(self, expected: int, *, max_samples: int = 500_000) -> None:
        self._now = time.perf_counter
        self.start = self._now()
        self.count = 0
        self.bytes = 0
        self.latency_sum = 0.0
        self.latency_max = 0.0
        self.sampling = max(1, expected // max_samples)
        self.samples: array = array("d")
        self.window = Window(self.start)

    def record(self, latency_ms: float, size: int) -> None:
        """One completed record (or fetch, for the consumer) of ``size`` bytes."""
        self.count += 1
        self.bytes += size
        self.latency_sum += latency_ms
        if latency_ms > self.latency_max:
            self.latency_max = latency_ms
        w = self.window
        w.count += 1
        w.bytes += size
        w.latency_sum += latency_ms
        if latency_ms > w.latency_max:
            w.latency_max = latency_ms
        if self.count % self.sampling == 0:
            self.samples.append(latency_ms)

    def add_bytes(self, count: int, size: int) -> None:
        """Records counted without a latency each (a consumer's fetched batch)."""
        self.count += count
        self.bytes += size
        self.window.count += count
        self.window.bytes += size

    def window_line(self, noun: str = "records sent", *, latency: bool = True) -> str:
        """The progress line for the current window, which then restarts."""
        now = self._now()
        w = self.window
        elapsed = max(now - w.start, 1e-9)
        avg = w.latency_sum / w.count if w.count else 0.0
        line = (f"{w.count} {noun}, {w.count / elapsed:.1f} records/sec "
                f"({w.bytes / MB / elapsed:.2f} MB/sec)")
        if latency:
            line += f", {avg:.1f} ms avg latency, {w.latency_max:.1f} ms max latency"
        line += "."
        self.window = Window(now)
        return line

    def summary(self, noun: str = "records sent") -> str:
        """The final line: totals, rates and latency percentiles."""
        elapsed = max(self._now() - self.start, 1e-9)
        ordered = array("d", sorted(self.samples))
        avg = self.latency_sum / self.count if self.count else 0.0
        return (
            f"{self.count} {noun}, {self.count / elapsed:.1f} records/sec "
            f"({self.bytes / MB / elapsed:.2f} MB/sec), {avg:.2f} ms avg latency, "
            f"{self.latency_max:.2f} ms max latency, {percentile(ordered, 0.5):.0f} ms 50th, "
            f"{percentile(ordered, 0.95):.0f} ms 95th, {percentile(ordered, 0.99):.0f} ms 99th, "
            f"{percentile(ordered, 0.999):.0f} ms 99.9th."
        )

    @property
    def elapsed_s(self) -> float:
        return self._now() - self.start


class Throttle:
    """Keeps a loop at ``per_second`` operations (no limit when ≤ 0), as Kafka's throttler."""

    def __init__(self, per_second: float) -> None:
        self.per_second = per_second
        self.start = time.perf_counter()

    def delay(self, done: int) -> float:
        """Seconds to sleep after ``done`` operations to stay at the target rate."""
        if self.per_second <= 0:
            return 0.0
        ahead = done / self.per_second - (time.perf_counter() - self.start)
        return ahead if ahead > 0 else 0.0
