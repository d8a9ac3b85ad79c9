"""LoginThrottle on a manual clock: the budget per address + user, per address and per user,
exponential back-off refusing logins unchecked, one check per back-off however many race,
success refunds and exempts its pair, decay, bounded tables; and the mechanisms and the SASL
session around it (a throttled login is never a credential check nor a failure)."""

from __future__ import annotations

import pytest

from strom.broker.security.listeners import Listener, SecurityProtocol
from strom.broker.security.login_throttle import (
    HALF_LIFE_FACTOR,
    KEY_BUDGET_FACTOR,
    MAX_ENTRIES,
    LoginGate,
    LoginThrottle,
)
from strom.broker.security.mechanisms import AuthenticationFailed, LoginThrottled
from strom.broker.security.sasl import SaslSession, SaslState, sasl_settings
from strom.common.config import BrokerConfig


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def throttle(clock: Clock, budget: int = 3) -> LoginThrottle:
    return LoginThrottle(budget, backoff_s=1.0, max_backoff_s=8.0, clock=clock)


def attempt(t: LoginThrottle, ip: str, user: str, ok: bool = False) -> bool:
    """One login: False when refused unchecked."""
    gate = t.gate(ip)
    try:
        gate.admit(user)
    except LoginThrottled:
        return False
    if ok:
        gate.succeeded()
    else:
        gate.failed()
    return True


def test_a_pair_backs_off_exponentially_after_its_budget() -> None:
    clock = Clock()
    t = throttle(clock)
    assert [attempt(t, "10.0.0.1", "alice") for _ in range(4)] == [True] * 3 + [False]
    clock.now += 0.99
    assert not attempt(t, "10.0.0.1", "alice")
    clock.now += 0.02  # 1 s after the last failure
    assert attempt(t, "10.0.0.1", "alice")
    clock.now += 1.5  # the next back-off is 2 s
    assert not attempt(t, "10.0.0.1", "alice")
    clock.now += 0.6
    assert attempt(t, "10.0.0.1", "alice")
    for _ in range(10):  # doubling, capped at 8 s
        clock.now += 8.01
        assert attempt(t, "10.0.0.1", "alice")
    assert t.refused == 3
    # Neighbours are untouched: the pair's failures beyond its budget are not theirs.
    assert attempt(t, "10.0.0.1", "bob", ok=True)
    assert attempt(t, "10.0.0.2", "alice", ok=True)


def test_racing_connections_get_one_check_per_back_off() -> None:
    clock = Clock()
    t = throttle(clock)
    for _ in range(3):
        attempt(t, "10.0.0.1", "alice")
    clock.now += 1.0
    gates = [t.gate("10.0.0.1") for _ in range(50)]
    admitted = 0
    for gate in gates:  # all admitted before any one reports its result (SCRAM's two steps)
        try:
            gate.admit("alice")
            admitted += 1
        except LoginThrottled:
            pass
    assert admitted == 1


def test_a_success_in_back_off_is_refunded_and_exempts_its_pair() -> None:
    clock = Clock()
    t = throttle(clock)
    for _ in range(3):
        attempt(t, "10.0.0.1", "alice")
    clock.now += 1.0
    assert attempt(t, "10.0.0.1", "alice", ok=True)  # the right password at last
    assert all(attempt(t, "10.0.0.1", "alice", ok=True) for _ in range(20))
    assert attempt(t, "10.0.0.1", "alice")  # exempt until it fails: then it counts again
    assert not attempt(t, "10.0.0.1", "alice")


def test_spraying_users_from_one_address_backs_the_address_off() -> None:
    clock = Clock()
    t = throttle(clock)
    allowed = [attempt(t, "10.0.0.1", f"user{i}") for i in range(3 * KEY_BUDGET_FACTOR + 1)]
    assert allowed == [True] * 3 * KEY_BUDGET_FACTOR + [False]
    assert not attempt(t, "10.0.0.1", "someone-else", ok=True)  # a new pair waits too
    assert attempt(t, "10.0.0.2", "someone-else", ok=True)  # other addresses do not


def test_many_addresses_on_one_user_back_the_user_off_but_not_its_good_pairs() -> None:
    clock = Clock()
    t = throttle(clock)
    assert attempt(t, "10.9.9.9", "alice", ok=True)  # alice's own client, before the attack
    allowed = [attempt(t, f"10.0.0.{i}", "alice") for i in range(3 * KEY_BUDGET_FACTOR + 1)]
    assert allowed == [True] * 3 * KEY_BUDGET_FACTOR + [False]
    assert attempt(t, "10.9.9.9", "alice", ok=True)  # exempt: logged in before
    assert attempt(t, "10.0.0.200", "bob", ok=True)  # another user


def test_failures_decay_and_are_forgiven() -> None:
    clock = Clock()
    t = throttle(clock)
    for _ in range(3):
        attempt(t, "10.0.0.1", "alice")
    assert not attempt(t, "10.0.0.1", "alice")
    clock.now += 2 * HALF_LIFE_FACTOR * t.max_backoff_s  # two half-lives: 3 → 0.75
    assert [attempt(t, "10.0.0.1", "alice") for _ in range(3)] == [True, True, False]
    clock.now += 4 * HALF_LIFE_FACTOR * t.max_backoff_s  # 2.75 → 0.17: all forgiven
    assert [attempt(t, "10.0.0.1", "alice") for _ in range(4)] == [True] * 3 + [False]


def test_unnamed_users_are_not_counted_and_tables_are_bounded() -> None:
    clock = Clock()
    t = throttle(clock, budget=1)
    for _ in range(100):
        gate = t.gate("10.0.0.1")
        gate.admit(None)  # OAUTHBEARER
        gate.failed()
        LoginGate(t, "10.0.0.1").failed()  # failed before naming a user
    assert attempt(t, "10.0.0.1", "alice", ok=True)
    for i in range(MAX_ENTRIES + 10):
        attempt(t, f"ip{i}", f"user{i}")
    assert len(t.pairs) == len(t.addresses) == len(t.users) == MAX_ENTRIES


def plain_session(config: dict[str, object], peer: str) -> SaslSession:
    settings = sasl_settings(
        BrokerConfig({"sasl.enabled.mechanisms": "PLAIN",
                      "sasl.jaas.config": "org.apache.kafka.common.security.plain."
                      'PlainLoginModule required user_alice="right";', **config}),
        Listener("SASL", SecurityProtocol.SASL_PLAINTEXT, "", 0), lambda u, m: None,
        LoginThrottle.from_config(BrokerConfig(config)))
    session = SaslSession(settings, peer)
    assert session.handshake("PLAIN", 1)
    return session


def test_a_throttled_plain_login_is_refused_without_checking_the_password() -> None:
    config: dict[str, object] = {"connection.failed.authentication.backoff.budget": 2}
    first = plain_session(config, "10.0.0.1:5000")
    throttle_ = first.settings.throttle
    assert throttle_ is not None
    for _ in range(2):
        session = SaslSession(first.settings, "10.0.0.1:5000")
        session.handshake("PLAIN", 1)
        with pytest.raises(AuthenticationFailed, match="Invalid username or password"):
            session.authenticate(b"\x00alice\x00wrong")
    session = SaslSession(first.settings, "10.0.0.1:5001")
    session.handshake("PLAIN", 1)
    with pytest.raises(LoginThrottled, match="credentials not checked"):
        session.authenticate(b"\x00alice\x00right")  # even the right one is not checked
    assert session.state is SaslState.FAILED and throttle_.refused == 1
    other = SaslSession(first.settings, "10.0.0.2:5000")  # another address: checked
    other.handshake("PLAIN", 1)
    other.authenticate(b"\x00alice\x00right")
    assert other.authenticated


def test_off_with_a_zero_max_backoff() -> None:
    assert LoginThrottle.from_config(BrokerConfig(
        {"connection.failed.authentication.backoff.max.ms": 0})) is None
    assert LoginThrottle.from_config(BrokerConfig({})) is not None
