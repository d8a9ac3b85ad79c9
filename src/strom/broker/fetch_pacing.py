"""Fetch pacing: keep a prefetching consumer from overrunning its own queue.

Why. librdkafka (confluent-kafka, kcat, …) prefetches: it sends the next Fetch as soon as it has
parsed a response, and when its local queue holds at least ``queued.min.messages`` (100,000)
records or ``queued.max.messages.kbytes`` x 1000 bytes of record values (65,536,000) at that
moment it stops fetching **every** partition for ``fetch.queue.backoff.ms`` (1 s by default),
then checks again (librdkafka 2.x decides per partition, but every partition's queue forwards
to the one consumer queue the limits are checked against, so all back off together). A broker
that answers faster than the application drains therefore leaves the consumer idle most of
each second: 8 x 1 MiB responses overflow the default queue after two responses, and strom
consumed 169 k records/s where a slower peer served 240 k (docs/benchmarks.md). Kafka's broker
behaves like strom did here.

The broker cannot see the client's queue. The one signal it gets is the stall itself: a
consumer that was re-fetching back to back, was last sent a response that left data behind
(*backlogged*), and then stays silent for at least :data:`STALL_GAP` seconds. Everything
below is driven by that signal, identically for every client; nothing looks at client names.
A back-off lasts as configured, so once one has been seen, a silence shorter than
:data:`HICCUP` of the longest is the client being slow (descheduled on a loaded machine,
parsing), not a stall; windows of earlier such silences are dropped from the fit (a 0.26 s
hiccup taken for a stall once fitted a 9 MB limit to a 64 MB queue).

Model. The client's queue is empty when a *window* starts (the first fetch, or the first
response after one that left nothing behind: the consumer had caught up), or, when it starts
after a stall of ``g`` seconds, holds what the stall left: ``max(0, L + half the last
response - D x g)`` (a queue larger than ``D x g`` outlasts the back-off); its application
takes records out at a drain rate ``D`` whenever the queue holds any. So, from the window's own
log of responses (time, bytes), the queue at the window's end is known for every hypothetical
``D`` (:func:`queue_at_end`, Lindley's recursion: the largest ``bytes sent since response j
- D x time since response j``; it accounts for the application waiting for data). The
client stalled because that queue reached its limit ``L`` (bytes): ``queue(D) ~= L`` — one
equation per stall, in two unknowns.

Algorithm (per connection, amounts in bytes, times in monotonic seconds):

* **Unpaced** until the first stall: responses are as large and as quick as the request allows.
* **First stall**: nothing was known before it (it cannot be avoided without guessing). The
  window's bytes over the window *and* the gap are a lower bound of ``D`` (the queue was
  empty again when the client resumed), its bytes over its own span an upper one (the queue
  grew); the pacing ``rate`` starts at their geometric mean and ramps up gently,
  ``exp(RAMP · t)``, while responses stay backlogged, so that the next window, if it ends in
  a stall, has a different shape from the unpaced first one and overshoots little.
* **Later stalls**: two windows of different shapes give ``L`` and ``D`` (:func:`fit_limit`:
  the ``D`` at which both imply the same limit, accepted when its uncertainty from the
  windows' last responses is at most :data:`FIT_ERROR`). ``L`` is a client setting and is
  kept (a better-determined fit replaces it); from then on each stall gives the current ``D``
  from its own window alone (:func:`drain_for_limit`), and the rate becomes ``MARGIN · D``
  (never below the window's lower bound), probing upward slowly (``exp(PROBE · t)``) in case
  the application sped up. The limit a window resumed with depends on ``L`` itself, so the
  fit is iterated to a fixed point (:func:`fit_limit_iterated`). When the fitted queue
  outlasted the stall's silence (``L >= D x g``, less :data:`FREE_IDLE`), the stall cost
  the client nothing and pacing could only slow it: it is served unpaced until a stall says
  otherwise. Without a fit yet the rate backs off multiplicatively (``BETA``) and the ramp
  halves, so the same overshoot does not repeat.
* **Paced**: a token bucket filled at ``rate`` holds at most ``BUCKET · L`` (the client's
  queue is empty after a stall); a response carries at most the tokens there are (never less
  than :data:`MIN_BUDGET`), and a request is held until a slice (``rate · SLICE``) of tokens
  has accumulated.

Invariants: a stall is only counted after at least :data:`MIN_BURST` backlogged response was
re-requested without a gap (within :data:`STALL_GAP`), so a client that fetches on demand
(kafka-python, aiokafka, the Java client: the next fetch only once the application used the
data) is never paced, however slow its application. A consumer that has caught up gets small
responses whose pacing delay is small, so tail latency is unaffected. Only consumer fetches are
paced, never replicas'. A window's log holds at most :data:`WINDOW_POINTS` entries (older
neighbours are merged), so a stall costs O(WINDOW_POINTS x FIT_POINTS x bisection steps).

The pacer is owned by one connection and used from the event loop only (not thread-safe).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

#: Silence after a backlogged response that counts as a client-side stall, seconds.
STALL_GAP = 0.25
#: Backlogged responses re-requested without a gap before a stall counts.
MIN_BURST = 1
#: Paced responses carry about this many seconds of data at the pacing rate.
SLICE = 0.025
#: The smallest response budget while paced, bytes.
MIN_BUDGET = 64 * 1024
#: Growth of the rate after the first stall (per second, exponential).
RAMP = 0.3
#: Growth of the rate once the drain rate is known (per second, exponential).
PROBE = 0.01
#: Fraction of the estimated drain rate paced at once it is known.
MARGIN = 0.97
#: Bytes the client may be sent at once after a stall or an idle spell, as a fraction of its
#: learned queue limit (its queue is empty then).
BUCKET = 0.35
#: Multiplicative decrease of the pacing rate at a stall that gave no estimate.
BETA = 0.5
#: A silence shorter than this fraction of the longest stall seen is a hiccup of the client
#: (descheduled, busy parsing), not its queue back-off: a back-off lasts as configured.
HICCUP = 0.5
#: A stall after which the client's queue, at the fitted limit and drain rate, outlasted all
#: but this fraction of the silence cost it (almost) nothing: the client is served unpaced.
FREE_IDLE = 0.05
#: Windows (stalls) remembered for the fit of the client's queue limit.
FIT_POINTS = 4
#: Seconds without a stall after which remembered windows are forgotten.
FIT_MEMORY = 30.0
#: Responses remembered per window (older neighbours are merged beyond this).
WINDOW_POINTS = 64
#: Two windows fit only if the drain rate they give is uncertain by at most this fraction
#: (each implied limit is uncertain by half its window's last response).
FIT_ERROR = 0.15
#: A window's implied limit must exceed this fraction of its last response for a fit: below,
#: its queue was about that one response at the crossing, whatever the drain rate.
FIT_FLOOR = 0.75
#: Fixed-point steps of a fit whose windows resumed with a partly drained queue.
FIT_STEPS = 4
#: The longest interval credited to rate growth at once, seconds.
_MAX_GROWTH_STEP = 0.2
#: Range of drain rates considered by the estimators, bytes/s.
_DRAIN_RANGE = (1e3, 1e11)


@dataclass
class Window:
    """The responses sent from an empty client queue up to a stall.

    ``points`` holds ``(time, bytes sent before that response)`` per response (or merged run of
    responses), oldest first; ``sent`` is the total, ``last_at`` / ``last_size`` describe the
    final response (after which the client decided to stall). ``resumed_after`` is the silence
    of the stall just before the window (0 when it started from an empty queue): the client's
    queue, at its limit plus ``overshoot`` (half the previous window's last response) at that
    stall, then still held what its application had not drained in that silence. ``gap`` is
    the silence that ended the window (0 while it is open)."""

    start: float
    resumed_after: float = 0.0
    overshoot: float = 0.0
    points: list[tuple[float, float]] = field(default_factory=list)
    sent: float = 0.0
    last_at: float = 0.0
    last_size: float = 0.0
    gap: float = 0.0

    def add(self, now: float, size: float) -> None:
        if size <= 0:
            return
        self.points.append((now, self.sent))
        self.sent += size
        self.last_at, self.last_size = now, size
        if len(self.points) > WINDOW_POINTS:
            # Merge pairs, keeping each pair's earlier point: the queue computed from the
            # remaining points is at most one merged run too low.
            self.points = self.points[::2]


def queue_at_end(window: Window, drain: float, limit: float = 0.0) -> tuple[float, float]:
    """The client's queue after the window's last response if its application drains at
    ``drain`` bytes/s whenever the queue holds data, with the time since the start of the busy
    spell that decides it (the queue's sensitivity to ``drain``). ``limit`` is the client's
    queue limit, for a window that resumed after a stall with that queue partly drained."""
    best, busy = 0.0, 0.0
    held = 0.0
    if window.resumed_after > 0:
        held = limit + window.overshoot - drain * window.resumed_after
    if held > 0:  # the queue never emptied since the start: one busy spell from there
        span = window.last_at - window.start
        best, busy = held + window.sent - drain * span, span
    for at, before in window.points:
        span = window.last_at - at
        queued = window.sent - before - drain * span
        if queued > best:
            best, busy = queued, span
    return best, busy


def _limit(window: Window, drain: float, limit: float = 0.0) -> tuple[float, float]:
    """The queue limit the window implies at ``drain`` (its last response counted half: the
    client stalls at the first decision with the queue at or past its limit), given ``limit``
    for the queue it resumed with."""
    queued, busy = queue_at_end(window, drain, limit)
    return queued - window.last_size / 2, busy


def drain_for_limit(window: Window, limit: float) -> float:
    """The drain rate at which the window ends with the queue at ``limit`` (bisection; the
    queue falls as the drain rate rises)."""
    lo, hi = _DRAIN_RANGE
    if _limit(window, lo, limit)[0] <= limit:
        return lo  # the window never held ``limit``: the queue was not empty at its start
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        if _limit(window, mid, limit)[0] > limit:
            lo = mid
        else:
            hi = mid
        if hi < lo * 1.001:
            break
    return math.sqrt(lo * hi)


def fit_limit(older: Window, newer: Window, guess: float = 0.0,
              ) -> tuple[float, float, float] | None:
    """``(limit, drain, relative error of drain)`` at which both windows end with the queue at
    the same limit, or None when they do not determine it. ``guess`` is the limit assumed for
    the queues windows resumed with (:func:`fit_limit_iterated` solves for it too).

    The implied limits fall with the drain rate at slopes given by their busy spans, so they
    cross where the windows' shapes differ; a crossing counts only where each limit exceeds
    :data:`FIT_FLOOR` of its window's last response (else that queue is about the response,
    whatever the rate: an unpaced window of 8 MiB responses otherwise fits a small limit at a
    drain rate equal to its own rate) and the drain rate it gives is uncertain by at most
    :data:`FIT_ERROR`. Of several, the most certain wins."""
    top = max(_window_rate(older), _window_rate(newer))
    if top <= 0:
        return None

    def diff(drain: float) -> float:
        return _limit(older, drain, guess)[0] - _limit(newer, drain, guess)[0]

    best: tuple[float, float, float] | None = None  # (error, limit, drain)
    steps = 48
    grid = [top * 1e-3 ** (1 - i / steps) for i in range(steps + 1)]  # top/1000 .. top
    values = [diff(d) for d in grid]
    for i in range(steps):
        if (values[i] > 0) == (values[i + 1] > 0):
            continue
        lo, hi = grid[i], grid[i + 1]
        for _ in range(30):
            mid = math.sqrt(lo * hi)
            if (diff(mid) > 0) == (values[i] > 0):
                lo = mid
            else:
                hi = mid
        drain = math.sqrt(lo * hi)
        limit_a, busy_a = _limit(older, drain, guess)
        limit_b, busy_b = _limit(newer, drain, guess)
        # Each implied limit is uncertain by half its window's last response; that moves the
        # crossing by this fraction of the drain rate.
        error = (older.last_size + newer.last_size) / 2 / max(abs(busy_a - busy_b) * drain, 1.0)
        floor = limit_a > FIT_FLOOR * older.last_size and limit_b > FIT_FLOOR * newer.last_size
        if floor and error <= FIT_ERROR and (best is None or error < best[0]):
            best = (error, (limit_a + limit_b) / 2, drain)
    return None if best is None else (best[1], best[2], best[0])


def fit_limit_iterated(older: Window, newer: Window, guess: float,
                       ) -> tuple[float, float, float] | None:
    """:func:`fit_limit` with the limit the windows resumed with equal to the one fitted
    (a few fixed-point steps from ``guess``; the last fit when they do not settle)."""
    fit = None
    for _ in range(FIT_STEPS):
        step = fit_limit(older, newer, guess)
        if step is None:
            return fit
        fit = step
        if abs(step[0] - guess) <= 0.01 * step[0]:
            break
        guess = step[0]
    return fit


def _window_rate(window: Window) -> float:
    """The window's bytes over its span: a drain rate beyond which it left no queue."""
    span = window.last_at - window.start
    return window.sent / span if span > 0 else 0.0


class FetchPacer:
    """Pacing state of one connection's consumer fetches (see the module docstring)."""

    __slots__ = (
        "_backoff",
        "_burst",
        "_fit_error",
        "_fit_from",
        "_growth",
        "_last_at",
        "_last_backlogged",
        "_tokens",
        "_tokens_at",
        "_window",
        "_windows",
        "drain_rate",
        "queue_bytes",
        "rate",
        "stalls",
    )

    def __init__(self) -> None:
        self.rate: float | None = None  # bytes/s; None while unpaced
        self.queue_bytes = 0.0  # estimated limit of the client's queue (0 until a stall)
        self.stalls = 0
        self._fit_error = math.inf  # relative error of the fit queue_bytes comes from
        self._fit_from: tuple[Window, Window] | None = None  # the windows of that fit
        self._backoff = 0.0  # the longest silence seen at a stall, seconds
        self.drain_rate = 0.0  # the latest drain rate estimate, bytes/s (0 until a fit)
        self._growth = RAMP
        self._last_at: float | None = None  # when the previous response was sent
        self._last_backlogged = False
        self._burst = 0  # backlogged responses re-requested without a gap, this window
        self._window: Window | None = None
        self._windows: list[Window] = []  # the latest stalls' windows, oldest first
        self._tokens = 0.0  # bytes that may be sent now (may go negative by one batch)
        self._tokens_at = 0.0

    @property
    def paced(self) -> bool:
        return self.rate is not None

    def before_read(self, now: float) -> float:
        """A consumer fetch arrived at ``now``: seconds to hold it before reading (0 = none)."""
        last = self._last_at
        if last is not None and self._last_backlogged:
            gap = now - last
            if gap >= STALL_GAP:
                if gap < HICCUP * self._backoff:
                    self._burst += 1  # the client was slow, its queue did not stop it
                elif self._burst >= MIN_BURST:
                    self._on_stall(now, last)
                else:  # an on-demand client, or one whose application paused: start afresh
                    self._new_window(now)
            else:
                self._burst += 1
        if self._window is None:
            self._window = Window(now)
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
        if self._window is None:
            self._window = Window(now)
        self._window.add(now, size)
        if not backlogged and self._window.sent > 0:
            self._window = None  # caught up: a stall's window starts with the next burst

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
        window = self._window if self._window is not None else Window(last)
        window.gap = now - last
        if window.gap > self._backoff:
            self._backoff = window.gap
        # Silences much shorter than the longest were hiccups taken for stalls before the
        # client's real back-off was seen: their windows say nothing about its queue.
        kept = [w for w in self._windows if w.gap >= HICCUP * self._backoff]
        if self._fit_from is not None and any(
            w.gap < HICCUP * self._backoff for w in self._fit_from
        ):
            self._fit_error, self._fit_from = math.inf, None
        first = not kept
        kept.append(window)
        del kept[:-FIT_POINTS]
        self._windows = kept
        # The client resumed with its queue drained: it took the whole window in, at least.
        lower = max(window.sent / max(now - window.start, 1e-3), MIN_BUDGET / SLICE)
        for older in kept[-2::-1]:  # the newest pair that determines the limit
            fit = fit_limit_iterated(older, window, self.queue_bytes)
            if fit is not None and fit[2] < self._fit_error:
                self.queue_bytes, self._fit_error = fit[0], fit[2]
                self._fit_from = (older, window)
                break
        if self._fit_error < math.inf:
            drain = self.drain_rate = drain_for_limit(window, self.queue_bytes)
            if self.queue_bytes >= drain * window.gap * (1 - FREE_IDLE):
                self.rate = None  # the queue outlasted the back-off: the stall cost nothing
            else:
                self.rate = max(MARGIN * drain, lower)
            self._growth = PROBE
        elif self.rate is None or first:
            # The drain rate lies between that bound and the window's own rate (the queue
            # grew): start at their geometric mean.
            self.queue_bytes = max(float(MIN_BUDGET), _limit(window, lower, self.queue_bytes)[0])
            self.rate = math.sqrt(lower * max(_window_rate(window), lower))
            self._growth = RAMP
        else:
            # No estimate yet: the rate at the stall was too high. Back off, not below the bound.
            implied = _limit(window, lower, self.queue_bytes)[0]
            self.queue_bytes = max(float(MIN_BUDGET), min(self.queue_bytes, implied))
            self.rate = max(BETA * self.rate, lower)
            self._growth /= 2  # and ramp more gently, or the same overshoot comes back
        # The client's queue drained during the gap: it can take a share of its limit at once.
        self._tokens = self._capacity()
        self._tokens_at = now
        self._new_window(now, window.gap, window.last_size / 2)

    def _new_window(self, now: float, resumed_after: float = 0.0, overshoot: float = 0.0,
                    ) -> None:
        previous = self._window
        if previous is not None and now - previous.start > FIT_MEMORY:
            self._windows.clear()  # the application may have changed its pace
        self._window = Window(now, resumed_after, overshoot)
        self._burst = 0
