"""Kafka's quota meters on a manual clock: the sampled rate and its throttle time, the
initial burst, window expiry, the token bucket, and meter sharing by precedence."""

from __future__ import annotations

import pytest

from strom.broker.quotas.manager import PRODUCE, REQUEST, ClientQuotas
from strom.broker.quotas.rate import SampledRate, TokenBucket
from strom.metadata.image import MetadataImage


def test_a_new_meter_counts_at_least_ten_windows_so_a_burst_passes() -> None:
    rate = SampledRate(0.0)
    rate.record(10_000_000, 0.5)
    # 10 MB in the first half second of a fresh meter: over 10.5 s, within 1 MB/s.
    assert rate.rate(0.5) == pytest.approx(10_000_000 / 10.5)
    assert rate.throttle_s(1_000_000, 0.5) == 0.0
    rate.record(1_000_000, 0.6)
    # Kafka's ClientQuotaManager: (rate - bound) / bound x window span.
    span = 10.6
    expected = (11_000_000 / span - 1_000_000) / 1_000_000 * span
    assert rate.throttle_s(1_000_000, 0.6) == pytest.approx(expected)
    assert expected == pytest.approx(0.4)  # 0.4 MB over, at 1 MB/s


def test_windows_older_than_the_sample_span_are_forgotten() -> None:
    rate = SampledRate(0.0, samples=2, window_s=1.0)
    rate.record(5.0, 0.0)
    rate.record(1.0, 1.5)
    assert rate.rate(1.5) == pytest.approx(6.0 / 1.5)
    # At 2 s the first window has expired; the span runs from the oldest kept window (1.5 s),
    # at least one full window: 0.5 + 1 s.
    assert rate.rate(2.0) == pytest.approx(1.0 / 1.5)


def test_token_bucket_bursts_then_throttles_until_the_balance_is_back() -> None:
    bucket = TokenBucket(bound=2.0, burst_s=11.0, now=0.0)
    assert bucket.throttle_s(2.0, 11.0, 0.0) == 0.0
    assert bucket.record(22, 2.0, 11.0, 0.0) == 0.0  # exactly the burst
    assert bucket.record(4, 2.0, 11.0, 0.0) == pytest.approx(2.0)  # 4 short at 2/s
    assert bucket.throttle_s(2.0, 11.0, 1.0) == pytest.approx(1.0)
    assert bucket.throttle_s(2.0, 11.0, 2.0) == 0.0


def test_meters_are_shared_as_the_winning_entity_says() -> None:
    now = [0.0]
    quotas = ClientQuotas(lambda: now[0], samples=2)
    image = MetadataImage("c", 1, 0, {}, {}, client_quotas={
        (("user", "alice"),): {PRODUCE: 100.0},
        (("client-id", None),): {PRODUCE: 100.0, REQUEST: 1.0}})
    quotas.configure(image)
    assert quotas.active
    # alice's quota is per user: two of her client ids share it.
    assert quotas.record(PRODUCE, "alice", "a", 100) == 0.0
    assert quotas.record(PRODUCE, "alice", "b", 100) > 0.0
    # the default client id: each client id has its own meter.
    assert quotas.record(PRODUCE, "bob", "a", 100) == 0.0
    assert quotas.record(PRODUCE, "bob", "b", 100) == 0.0
    # request time is bounded by one window
    assert quotas.record(REQUEST, "bob", "a", 1e6) == 1.0
    quotas.configure(MetadataImage("c", 2, 0, {}, {}))
    assert not quotas.active and quotas.record(PRODUCE, "alice", "b", 1e9) == 0.0


def test_request_time_throttle_matches_kafkas_worked_example() -> None:
    # 1 % of a second as the quota; 4 ms of handler time each second for 10 s, then a
    # 67.1 ms spike half a second later: 107.1 ms over 10.5 s is 10.2 ms/s, so
    # (10.2 - 10) / 10 x 10.5 s = 210 ms (the figure Kafka's ClientRequestQuotaManager gives).
    now = [0.0]
    quotas = ClientQuotas(lambda: now[0])
    quotas.configure(MetadataImage("c", 1, 0, {}, {}, client_quotas={
        (("client-id", "test-client"), ("user", "ANONYMOUS")): {REQUEST: 1.0}}))
    for second in range(10):
        now[0] = float(second)
        assert quotas.record(REQUEST, "ANONYMOUS", "test-client", 0.004 * 100) == 0.0
    now[0] = 10.5
    throttle = quotas.record(REQUEST, "ANONYMOUS", "test-client", 0.0671 * 100)
    assert round(throttle * 1000) == 210
