"""Fetch pacing: keep a prefetching consumer from overrunning its own queue.

Why. librdkafka (confluent-kafka, kcat, …) prefetches: it sends the next Fetch as soon as it has
parsed a response, and when its local queue holds more than ``queued.min.messages`` (100,000)
or ``queued.max.messages.kbytes`` (64 MiB) at that moment it stops fetching **every** partition
for ``fetch.queue.backoff.ms`` (1 s by default). A broker that answers faster than the
application drains therefore leaves the consumer idle most of each second: 8 x 1 MiB responses
overflow the default queue after two responses, and strom consumed 169 k records/s where a
slower peer served 240 k (docs/benchmarks.md). Kafka's broker behaves like strom did here.

The broker cannot see the client's queue. The one signal it gets is the stall itself: a
consumer that was re-fetching back to back, was last sent a response that left data behind
(*backlogged*), and then stays silent for at least :data:`STALL_GAP` seconds. Everything
below is driven by that signal, identically for every client; nothing looks at client names.

Algorithm (per connection, amounts in bytes, times in monotonic seconds):

* **Unpaced** until the first stall: responses are as large and as quick as the request allows.
* **First stall**: the burst's bytes over the burst *and* the gap are a lower bound of the
  drain rate, which becomes the pacing ``rate``; the burst's bytes less what that rate
  drained during the burst bound the client's queue limit (``queue_bytes``). The rate then
  ramps up by ``exp(RAMP · t)`` while responses stay backlogged.
* **Later stalls**: the client's queue was empty after the previous gap and full at this one.
  If fewer than ``queue_bytes`` were sent in between, the limit is smaller than believed and
  ``queue_bytes`` shrinks to what was sent (the rate stays). Otherwise the client drained
  about ``window_bytes - queue_bytes`` over the window, so ``rate := MARGIN · that / window``
  (the ramp may have overshot far), and the rate then probes upward slowly,
  ``exp(PROBE · t)``.
* **Paced**: a token bucket filled at ``rate`` holds at most ``BUCKET · queue_bytes`` (the
  client's queue is empty after a stall, so half its limit can go at once); a response
  carries at most the tokens there are (never less than :data:`MIN_BUDGET`), and a request
  is held until a slice (``rate · SLICE``) of tokens has accumulated.

Invariants: a stall is only counted after at least :data:`MIN_BURST` backlogged response was
re-requested without a gap (within :data:`STALL_GAP`), so a client that fetches on demand
(kafka-python, aiokafka, the Java client: the next fetch only once the application used the
data) is never paced, however slow its application. A consumer that has caught up gets small
responses whose pacing delay is small, so tail latency is unaffected. Only consumer fetches are
paced, never replicas'.

The pacer is owned by one connection and used from the event loop only (not thread-safe).
"""

from __future__ import annotations

import math

#: Silence after a backlogged response that counts as a client-side stall, seconds.
STALL_GAP = 0.25
#: Backlogged responses re-requested without a gap before a stall counts.
MIN_BURST = 1
#: Paced responses carry about this many seconds of data at the pacing rate.
SLICE = 0.025
#: The smallest response budget while paced, bytes.
MIN_BUDGET = 64 * 1024
#: Growth of the rate after the first stall (per second, exponential).
RAMP = 2.0
#: Growth of the rate after later stalls (per second, exponential).
PROBE = 0.01
#: Fraction of the estimated drain rate used after a later stall.
MARGIN = 0.9
#: Bytes the client may be sent at once after a stall or an idle spell, as a fraction of its
#: learned queue limit (its queue is empty then; the learned limit can be twice the real one).
BUCKET = 0.35
#: Multiplicative decrease of the pacing rate at a later stall.
BETA = 0.5
#: Stalls remembered for the fit of the client's queue limit and drain rate.
FIT_POINTS = 4
#: Seconds without a stall after which remembered stalls are forgotten.
FIT_MEMORY = 30.0
#: The longest interval credited to rate growth at once, seconds.
_MAX_GROWTH_STEP = 0.2


class FetchPacer:
    """Pacing state of one connection's consumer fetches (see the module docstring)."""

    __slots__ = (
        "_burst",
        "_growth",
        "_last_at",
        "_last_backlogged",
        "_stall_points",
        "_tokens",
        "_tokens_at",
        "_window_bytes",
        "_window_start",
        "queue_bytes",
        "rate",
        "stalls",
    )

    def __init__(self) -> None:
        self.rate: float | None = None  # bytes/s; None while unpaced
        self.queue_bytes = 0.0  # learned bound of the client's queue (0 until a stall)
        self.stalls = 0
        self._growth = RAMP
        self._last_at: float | None = None  # when the previous response was sent
        self._last_backlogged = False
        self._burst = 0  # backlogged responses re-requested without a gap, this window
        self._window_start: float | None = None
        self._window_bytes = 0.0
        self._tokens = 0.0  # bytes that may be sent now (may go negative by one batch)
        self._tokens_at = 0.0
        self._stall_points: list[tuple[float, float]] = []  # (window seconds, bytes sent)

    @property
    def paced(self) -> bool:
        return self.rate is not None

    def before_read(self, now: float) -> float:
        """A consumer fetch arrived at ``now``: seconds to hold it before reading (0 = none)."""
        last = self._last_at
        if last is not None and self._last_backlogged:
            if now - last >= STALL_GAP:
                if self._burst >= MIN_BURST:
                    self._on_stall(now, last)
                else:  # an on-demand client, or one whose application paused: start afresh
                    self._new_window(now)
            else:
                self._burst += 1
        if self._window_start is None:
            self._window_start = now
        rate = self.rate
        if rate is None:
            return 0.0
        tokens = self._refill(now, rate)
        want = min(max(MIN_BUDGET, rate * SLICE), self._capacity())
        return 0.0 if tokens >= want else (want - tokens) / rate

    def budget(self, now: float) -> int | None:
        """The most bytes a response read at ``now`` may carry, or None while unpaced."""
        rate = self.rate
        if rate is None:
            return None
        return max(MIN_BUDGET, int(self._refill(now, rate)))

    def after_read(self, now: float, size: int, backlogged: bool) -> None:
        """A response of ``size`` record bytes is being sent at ``now``; ``backlogged`` when it
        left data behind in some partition."""
        rate = self.rate
        if rate is not None:
            self._refill(now, rate)
            self._tokens -= size
            if backlogged and self._last_at is not None:
                step = min(max(now - self._last_at, 0.0), _MAX_GROWTH_STEP)
                self.rate = rate * math.exp(self._growth * step)
        self._last_at = now
        self._last_backlogged = backlogged
        self._window_bytes += size

    def _capacity(self) -> float:
        return max(MIN_BUDGET, BUCKET * self.queue_bytes)

    def _refill(self, now: float, rate: float) -> float:
        if now > self._tokens_at:
            self._tokens = min(self._capacity(),
                               self._tokens + rate * (now - self._tokens_at))
            self._tokens_at = now
        return self._tokens

    def _on_stall(self, now: float, last: float) -> None:
        self.stalls += 1
        start = self._window_start if self._window_start is not None else last
        window = self._window_bytes
        span = max(last - start, 0.0)
        points = self._stall_points
        points.append((span, window))
        del points[:-FIT_POINTS]
        fit = _fit_line(points)
        if fit is not None and self.rate is not None:
            # Every window went from an empty queue to a full one: bytes = limit + drained,
            # and drained <= drain rate x span (the application may have waited for data), so
            # the fitted slope is a lower bound of the drain rate; the pacing rate at the
            # stall was above it. Back off multiplicatively, not below the bound.
            self.queue_bytes, drain = fit
            self.rate = max(BETA * self.rate, MARGIN * drain, MIN_BUDGET / SLICE)
            self._growth = PROBE
        elif self.rate is None or window > self.queue_bytes:
            # The client drained at least everything over the window and the gap; its queue
            # limit is at most what is left of the window after draining at that rate.
            lower = window / max(now - start, 1e-3)
            self.queue_bytes = max(float(MIN_BUDGET), window - lower * span)
            self.rate = max(lower, MIN_BUDGET / SLICE)
            self._growth = RAMP
        else:
            # Less than the believed limit overflowed the (empty) queue: the limit is smaller.
            self.queue_bytes = max(float(MIN_BUDGET), window)
        # The client's queue drained during the gap: it can take half its limit at once.
        self._tokens = self._capacity()
        self._tokens_at = now
        self._new_window(now)

    def _new_window(self, now: float) -> None:
        if now - (self._window_start or now) > FIT_MEMORY:
            self._stall_points.clear()  # the application may have changed its pace
        self._window_start = now
        self._window_bytes = 0.0
        self._burst = 0


def _fit_line(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """Least-squares ``bytes = limit + rate x span`` through the stalls' (span, bytes) points;
    None unless the spans differ enough and both coefficients come out positive."""
    if len(points) < 2:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((x - mean_x) ** 2 for x, _ in points)
    if var < (0.05 * max(mean_x, 0.1)) ** 2 * n:
        return None
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / var
    intercept = mean_y - slope * mean_x
    if slope <= 0 or intercept <= 0:
        return None
    return intercept, slope
