"""The two meters behind Kafka's client quotas, on the broker's monotonic clock (seconds).

:class:`SampledRate` is Kafka's ``Rate`` over a ``SampledStat``: ``samples`` windows of
``window_s`` each (``quota.window.num`` = 11, ``quota.window.size.seconds`` = 1); a value
goes into the current window, a window older than ``samples * window_s`` is forgotten, and
the rate is the sum of the kept windows divided by the time they span — never less than
``samples - 1`` full windows, so a new meter lets an initial burst of about ten windows'
worth through, exactly as Kafka's does. :func:`SampledRate.throttle_s` is Kafka's
``ClientQuotaManager`` throttle time: ``(rate - bound) / bound * window span``, the time
the client must stay silent for the rate to come back to the bound.

:class:`TokenBucket` is Kafka's KIP-599 meter for controller mutations: ``bound`` tokens per
second, at most ``bound * samples * window_s`` banked (the burst), recording takes tokens
(the balance may go negative), and the throttle time is how long the balance needs to reach
zero again.

Not thread-safe: owned by the event-loop thread, like the connections that record into them.
"""

from __future__ import annotations


class SampledRate:
    """A rate over ``samples`` rotating windows (Kafka's ``Rate`` with ``SampledStat``)."""

    __slots__ = ("_current", "_samples", "_starts", "_values", "_window")

    def __init__(self, now: float, samples: int = 11, window_s: float = 1.0) -> None:
        self._samples = samples
        self._window = window_s
        self._starts = [now] * samples
        self._values = [0.0] * samples
        self._current = 0

    def record(self, value: float, now: float) -> None:
        i = self._current
        if now - self._starts[i] >= self._window:  # the current window is complete
            i = self._current = (i + 1) % self._samples
            self._starts[i] = now
            self._values[i] = 0.0
        self._values[i] += value

    def _purge(self, now: float) -> None:
        expire = self._samples * self._window
        for i in range(self._samples):
            if now - self._starts[i] >= expire:
                self._starts[i] = now
                self._values[i] = 0.0

    def span_s(self, now: float) -> float:
        """The time the kept windows cover, at least ``samples - 1`` full windows."""
        elapsed = now - min(self._starts)
        full = int(elapsed / self._window)
        if full < self._samples - 1:
            elapsed += (self._samples - 1 - full) * self._window
        return elapsed

    def rate(self, now: float) -> float:
        self._purge(now)
        return sum(self._values) / self.span_s(now)

    def throttle_s(self, bound: float, now: float) -> float:
        """How long to stay silent for the rate to fall back to ``bound`` (0 within it)."""
        rate = self.rate(now)
        if rate <= bound:
            return 0.0
        if bound <= 0:
            return float("inf")
        return (rate - bound) / bound * self.span_s(now)


class TokenBucket:
    """KIP-599's token bucket: ``bound`` tokens a second, ``bound * burst_s`` at most."""

    __slots__ = ("_last", "_tokens")

    def __init__(self, bound: float, burst_s: float, now: float) -> None:
        self._tokens = bound * burst_s
        self._last = now

    def _refill(self, bound: float, burst_s: float, now: float) -> None:
        self._tokens = min(bound * burst_s, self._tokens + (now - self._last) * bound)
        self._last = now

    def throttle_s(self, bound: float, burst_s: float, now: float) -> float:
        """How long until the balance is back to zero (0 while it is not negative)."""
        self._refill(bound, burst_s, now)
        if self._tokens >= 0:
            return 0.0
        return float("inf") if bound <= 0 else -self._tokens / bound

    def record(self, value: float, bound: float, burst_s: float, now: float) -> float:
        """Take ``value`` tokens; the throttle time in seconds (0 while the balance ≥ 0)."""
        self._refill(bound, burst_s, now)
        self._tokens -= value
        return self.throttle_s(bound, burst_s, now)
