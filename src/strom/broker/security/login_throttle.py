"""Failed SASL logins slowed per client address and per user.

Kafka only delays the answer to each failed authentication
(``connection.failed.authentication.delay.ms``) and closes the connection: 200 connections
tried 1,225 wrong PLAIN passwords a second against strom that way. Here every credential
check is also paid for by the side that fails:

* **Keys.** A failed login of a user that a client names (PLAIN's and SCRAM's user name —
  unknown users too) counts against three keys: the pair of the client's IP address and
  that user (one client guessing one password), the address (one client trying many users),
  and the user (many addresses trying one user). Each key's count decays with a half-life of
  ``HALF_LIFE_FACTOR`` times ``connection.failed.authentication.backoff.max.ms`` (10 minutes
  by default); a count is compared rounded (a key is in back-off from its budget-th failure
  until its count has decayed by half a failure). A pair's failures count against its
  address and user only while the pair is within its own budget, so one client retrying a
  wrong password (a misconfigured one) slows itself down but not its neighbours on a shared
  address nor its user elsewhere.
* **Budget, then back-off.** A pair may fail ``connection.failed.authentication.backoff.budget``
  (10) times, an address or a user ``KEY_BUDGET_FACTOR`` (3) times that, before it is in
  back-off: its next credential check then waits ``backoff.ms * 2^(count - budget)`` after its
  latest failure (1 s doubling, capped at ``backoff.max.ms``, 60 s). A login attempted sooner
  is refused *without its credentials being checked* (SASL_AUTHENTICATION_FAILED, saying so,
  after the usual delay) and is not counted. The attempt let through is charged a failure up
  front and refunded if it succeeds, so connections racing each other get one check through
  per back-off, not one each. Once an attacker has spent a budget, a key allows about one
  check a minute, whatever the number of connections.
* **Only the failing side.** Addresses and users that have not failed are never slowed. An
  (address, user) pair that logged in successfully within ``GOOD_PAIR_TTL_S`` (a day) is
  exempt from every back-off — a client keeps logging in while its user is attacked from
  elsewhere or its address is shared with a failing one — until it fails itself (the
  exemption ends at its first failure). What remains: a *new* pair on an address (or of a
  user) in back-off waits like the attacker.
* **Not counted:** failures before the client names a user (malformed exchanges),
  OAUTHBEARER (tokens are signed: there is nothing to guess).
* **Bounded memory.** Four tables (pairs, addresses, users, good pairs) of at most
  :data:`MAX_ENTRIES` entries each, least recently used dropped first; users are kept as a
  16-byte hash, so a long name costs nothing.

``connection.failed.authentication.backoff.max.ms=0`` turns this off (Kafka's behaviour).
Owned by the event-loop thread.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from strom.broker.security.mechanisms import LoginThrottled
from strom.common.config import BrokerConfig
from strom.common.rate_limited_log import RateLimitedLog

log = logging.getLogger("strom.broker.security")

HALF_LIFE_FACTOR = 10
KEY_BUDGET_FACTOR = 3
GOOD_PAIR_TTL_S = 86400.0
MAX_ENTRIES = 10_000
_MAX_DOUBLINGS = 40

Key = str | bytes | tuple[str, bytes]  # an address, a user's hash, or both


@dataclass(slots=True)
class _Failures:
    count: float  # decayed to ``decayed_at``
    decayed_at: float
    last_failure: float


def _user_key(user: str) -> bytes:
    return hashlib.blake2b(user.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class _Table:
    """Failure counts of one kind of key with its budget, LRU-bounded."""

    def __init__(self, name: str, budget: int, half_life_s: float) -> None:
        self.name = name
        self.budget = budget
        self._half_life = half_life_s
        self._entries: OrderedDict[Key, _Failures] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def count(self, key: Key, now: float) -> tuple[_Failures | None, float]:
        entry = self._entries.get(key)
        if entry is None:
            return None, 0.0
        self._entries.move_to_end(key)
        count = entry.count * 0.5 ** ((now - entry.decayed_at) / self._half_life)
        entry.count, entry.decayed_at = count, now
        return entry, count

    def charge(self, key: Key, now: float) -> float:
        """One more failure; the count after it."""
        entry, count = self.count(key, now)
        if entry is None:
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.popitem(last=False)
            entry = self._entries[key] = _Failures(0.0, now, now)
        entry.count, entry.last_failure = count + 1.0, now
        return entry.count

    def refund(self, key: Key, now: float) -> None:
        entry, count = self.count(key, now)
        if entry is not None:
            entry.count = max(0.0, count - 1.0)


class LoginThrottle:
    """The failure tables and rules of the module doc; one per broker."""

    def __init__(self, budget: int, backoff_s: float, max_backoff_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._clock = clock
        half_life = max(1.0, HALF_LIFE_FACTOR * max_backoff_s)
        self.pairs = _Table("pair", budget, half_life)
        self.addresses = _Table("address", budget * KEY_BUDGET_FACTOR, half_life)
        self.users = _Table("user", budget * KEY_BUDGET_FACTOR, half_life)
        self._good: OrderedDict[tuple[str, bytes], float] = OrderedDict()
        self._backoff_log = RateLimitedLog(log, logging.WARNING)
        self.refused = 0  # logins refused unchecked since start

    @classmethod
    def from_config(cls, config: BrokerConfig) -> LoginThrottle | None:
        """None when ``connection.failed.authentication.backoff.max.ms`` is 0 (off)."""
        max_ms = int(config.get("connection.failed.authentication.backoff.max.ms"))
        if max_ms <= 0:
            return None
        return cls(int(config.get("connection.failed.authentication.backoff.budget")),
                   int(config.get("connection.failed.authentication.backoff.ms")) / 1000.0,
                   max_ms / 1000.0)

    def gate(self, ip: str) -> LoginGate:
        return LoginGate(self, ip)

    def now(self) -> float:
        return self._clock()

    def wait(self, table: _Table, key: Key, now: float) -> tuple[float, bool]:
        """(seconds until ``key`` may be checked, whether it is in back-off)."""
        entry, count = table.count(key, now)
        if entry is None or round(count) < table.budget:
            return 0.0, False
        doublings = min(round(count) - table.budget, _MAX_DOUBLINGS)
        backoff = min(self.max_backoff_s, self.backoff_s * 2.0 ** doublings)
        return max(0.0, entry.last_failure + backoff - now), True

    def is_good(self, pair: tuple[str, bytes], now: float) -> bool:
        since = self._good.get(pair)
        if since is None:
            return False
        if now - since > GOOD_PAIR_TTL_S:
            del self._good[pair]
            return False
        return True

    def remember_good(self, pair: tuple[str, bytes], now: float) -> None:
        self._good.pop(pair, None)
        if len(self._good) >= MAX_ENTRIES:
            self._good.popitem(last=False)
        self._good[pair] = now

    def forget_good(self, pair: tuple[str, bytes]) -> None:
        self._good.pop(pair, None)

    def charged(self, table: _Table, key: Key, shown: str, now: float) -> float:
        """Charge one failure to ``key``; logs (rate-limited) when it enters back-off."""
        count = table.charge(key, now)
        if round(count) == table.budget:
            self._backoff_log.log("%s failed to authenticate %d times: checked at most once "
                                  "per back-off from now on (up to %.0f s)", shown,
                                  round(count), self.max_backoff_s)
        return count


class LoginGate:
    """One login on one connection. The mechanism calls :meth:`admit` once the client has
    named its user (before checking any credential); the session then reports
    :meth:`failed` or :meth:`succeeded`."""

    def __init__(self, throttle: LoginThrottle, ip: str) -> None:
        self._throttle = throttle
        self._ip = ip
        self._user: bytes | None = None
        self._shown = ""
        self._charged: list[_Table] = []

    def _keys(self) -> list[tuple[_Table, Key, str]]:
        t, user = self._throttle, self._user
        assert user is not None
        return [(t.pairs, (self._ip, user), f"user {self._shown!r} from {self._ip}"),
                (t.addresses, self._ip, f"address {self._ip}"),
                (t.users, user, f"user {self._shown!r}")]

    def admit(self, user: str | None) -> None:
        """Allow the credential check of ``user`` (None: not counted — OAUTHBEARER), or
        raise :class:`LoginThrottled` (not counted either)."""
        self._user, self._charged = None, []
        if user is None:
            return
        t, now = self._throttle, self._throttle.now()
        self._user, self._shown = _user_key(user), user[:64]
        if t.is_good((self._ip, self._user), now):
            return
        waits = [(table, key, *t.wait(table, key, now)) for table, key, _ in self._keys()]
        wait = max(w for _, _, w, _ in waits)
        if wait > 0:
            t.refused += 1
            raise LoginThrottled(
                "Authentication failed: too many failed authentications from this address or "
                f"for this user; credentials not checked, retry in {wait:.1f} s",
                f"refused unchecked (back-off, {wait:.1f} s left) for user {self._shown!r}")
        for table, key, _, backing_off in waits:
            if backing_off:  # charged up front: one check per back-off, however many race
                table.charge(key, now)
                self._charged.append(table)

    def failed(self) -> None:
        """The credentials were refused: charge the keys not yet charged (the address and the
        user only while the pair is within its budget)."""
        if self._user is None:
            return
        t, now = self._throttle, self._throttle.now()
        t.forget_good((self._ip, self._user))
        pair_table, pair, pair_shown = self._keys()[0]
        if pair_table in self._charged:
            within = False  # the pair was in back-off
        else:
            within = round(t.charged(pair_table, pair, pair_shown, now)) <= pair_table.budget
        for table, key, shown in self._keys()[1:]:
            if within and table not in self._charged:
                t.charged(table, key, shown, now)
        self._charged = []

    def succeeded(self) -> None:
        if self._user is None:
            return
        t, now = self._throttle, self._throttle.now()
        for table, key, _ in self._keys():
            if table in self._charged:
                table.refund(key, now)
        self._charged = []
        t.remember_good((self._ip, self._user), now)
