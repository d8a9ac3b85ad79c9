"""Replication quotas (KIP-73) without a network: Kafka's SimpleRate windows, the throttled
replica lists (``*`` and ``partition:broker``, filtered by this broker's id), rate changes
taking effect at once, configuration from metadata images, and the leader-side selection
(only replicas outside the ISR are held back) on a real leader partition."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.common.config import MAX_LONG, BrokerConfig
from strom.common.types import TopicPartition
from strom.protocol import fast
from strom.replication.quota import (
    ALL_PARTITIONS,
    ReplicationQuota,
    ReplicationQuotas,
    SimpleRate,
    should_leader_throttle,
    throttled_partitions,
    throttled_size,
)
from tests.replication.harness import NODE, Harness, image, partition_info

LEADER_KEY = "leader.replication.throttled.replicas"
FOLLOWER_KEY = "follower.replication.throttled.replicas"


class Now:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_a_new_rate_spans_at_least_one_window() -> None:
    rate = SimpleRate(samples=11, window_s=1.0)
    assert rate.rate(0.0) == 0.0
    rate.record(2000, 0.0)
    assert rate.rate(0.5) == 2000  # not 4000: at least one window
    assert rate.rate(4.0) == 500  # the time since the oldest window started
    rate.record(2000, 4.0)  # a second window
    assert rate.rate(4.0) == 1000


def test_windows_rotate_and_expire() -> None:
    rate = SimpleRate(samples=3, window_s=1.0)
    for second in range(10):  # 1000 a second, one window each
        rate.record(1000, float(second))
    # three windows kept (7, 8, 9): 3000 over the 2.5 s since window 7 started
    assert rate.rate(9.5) == pytest.approx(3000 / 2.5)
    # all kept windows older than 3 windows: forgotten
    assert rate.rate(13.0) == 0.0


def test_values_within_one_window_add_up() -> None:
    rate = SimpleRate(samples=11, window_s=1.0)
    for i in range(10):
        rate.record(100, i * 0.05)
    assert rate.rate(0.5) == 1000


@pytest.mark.parametrize(("value", "node", "expected"), [
    ("*", 1, ALL_PARTITIONS),
    (" * ", 7, ALL_PARTITIONS),
    ("0:1,1:2,3:1", 1, frozenset({0, 3})),
    ("0:1, 1:2 , 3:1", 2, frozenset({1})),
    ("0:1,1:2", 3, frozenset()),
    ("", 1, frozenset()),
    (None, 1, frozenset()),
])
def test_throttled_replica_lists_keep_this_brokers_entries(
        value: str | None, node: int, expected: frozenset[int]) -> None:
    assert throttled_partitions(value, node) == expected


def test_is_throttled_by_topic_and_partition() -> None:
    quota = ReplicationQuota("leader", 1, Now())
    quota.mark_throttled("a", "0:1,2:1,1:0")
    quota.mark_throttled("b", "*")
    quota.mark_throttled("c", "0:0")  # another broker's entry only
    assert quota.is_throttled(TopicPartition("a", 0))
    assert quota.is_throttled(TopicPartition("a", 2))
    assert not quota.is_throttled(TopicPartition("a", 1))
    assert quota.is_throttled(TopicPartition("b", 41))
    assert not quota.is_throttled(TopicPartition("c", 0))
    assert not quota.is_throttled(TopicPartition("d", 0))
    assert set(quota.throttled_topics()) == {"a", "b"}
    quota.mark_throttled("b", "")
    assert not quota.is_throttled(TopicPartition("b", 41))


def test_quota_exceeded_above_the_bound_and_rate_changes_apply_at_once() -> None:
    now = Now()
    quota = ReplicationQuota("follower", 1, now)
    quota.record(10**9)
    assert not quota.is_quota_exceeded()  # no bound (MAX_LONG)
    quota.bound = 2_000_000
    assert quota.is_quota_exceeded()
    quota.bound = 10**9
    assert not quota.is_quota_exceeded()  # exactly at the bound is within it
    quota.bound = 2_000_000
    now.t += 400  # long past every window: forgotten
    assert not quota.is_quota_exceeded()
    quota.record(1_000_000)
    now.t += 0.2
    assert not quota.is_quota_exceeded()  # 1 MB over one window: 1 MB/s
    quota.record(1_500_000)
    assert quota.is_quota_exceeded()  # 2.5 MB over one window
    now.t += 1.1
    assert not quota.is_quota_exceeded()  # 2.5 MB over 1.3 s


def test_configured_from_images_and_dynamic_broker_configs() -> None:
    now = Now()
    quotas = ReplicationQuotas(NODE, now)
    static = BrokerConfig({})
    throttled = image(partition_info(0), partition_info(1),
                      configs={LEADER_KEY: f"0:{NODE},1:9", FOLLOWER_KEY: "*"})
    quotas.configure(throttled, static.with_dynamic(
        {"leader.replication.throttled.rate": "1000"},
        {"follower.replication.throttled.rate": "2000"}))
    assert (quotas.leader.bound, quotas.follower.bound) == (1000, 2000)
    assert quotas.leader.is_throttled(TopicPartition("t", 0))
    assert not quotas.leader.is_throttled(TopicPartition("t", 1))
    assert quotas.follower.is_throttled(TopicPartition("t", 1))
    # the broker's own value wins over the cluster default; removing both lifts the bound
    quotas.configure(throttled, static.with_dynamic(
        {"leader.replication.throttled.rate": "1000"},
        {"leader.replication.throttled.rate": "5000"}))
    assert (quotas.leader.bound, quotas.follower.bound) == (5000, MAX_LONG)
    # the topic configs removed, then the topic deleted: nothing throttled
    quotas.configure(image(partition_info(0)), static)
    assert not quotas.follower.is_throttled(TopicPartition("t", 1))
    quotas.configure(throttled, static)
    quotas.configure(image(), static)
    assert quotas.leader.throttled_topics() == quotas.follower.throttled_topics() == {}


def test_for_broker_takes_the_window_settings() -> None:
    now = Now()
    quotas = ReplicationQuotas.for_broker(BrokerConfig({
        "replication.quota.window.num": "2", "replication.quota.window.size.seconds": "5"}),
        NODE, now)
    quotas.leader.bound = 100
    quotas.leader.record(1000)  # 1000 over one 5 s window: 200/s
    assert quotas.leader.is_quota_exceeded()
    now.t += 10.0  # both windows expired
    assert not quotas.leader.is_quota_exceeded()


def test_the_leader_holds_back_only_throttled_replicas_outside_the_isr(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    try:
        h.apply(image(partition_info(0, replicas=(1, 2, 3), isr=(1, 2)),
                      partition_info(1, replicas=(1, 2, 3), isr=(1, 2))))
        p0 = h.replicas.get("t", 0)
        p1 = h.replicas.get("t", 1)
        assert p0 is not None and p1 is not None
        now = Now()
        quota = ReplicationQuota("leader", NODE, now, bound=1000)
        quota.mark_throttled("t", f"0:{NODE}")
        assert not should_leader_throttle(quota, p0, 3)  # within the quota
        quota.record(5000)
        assert should_leader_throttle(quota, p0, 3)  # throttled, exceeded, not in the ISR
        assert not should_leader_throttle(quota, p0, 2)  # in the ISR: never held back
        assert not should_leader_throttle(quota, p1, 3)  # not a throttled partition
        quota.bound = 10**6  # the rate raised: let through at once
        assert not should_leader_throttle(quota, p0, 3)
    finally:
        h.close()


def test_throttled_size_counts_only_throttled_partitions() -> None:
    quota = ReplicationQuota("leader", NODE, Now())
    quota.mark_throttled("t", "*")
    quota.mark_throttled("u", f"1:{NODE}")

    class Region:
        size = 700

    topics = [
        fast.FetchTopicResult("t", None, [
            fast.FetchPartitionResult(0, records=[b"x" * 100, memoryview(b"y" * 20)]),
            fast.FetchPartitionResult(1, records=[Region()])]),
        fast.FetchTopicResult("u", None, [
            fast.FetchPartitionResult(0, records=[b"z" * 1000]),
            fast.FetchPartitionResult(1, records=[b"z" * 3])]),
        fast.FetchTopicResult(None, b"\x01" * 16, [
            fast.FetchPartitionResult(0, records=[b"z" * 50])]),
    ]
    assert throttled_size(quota, topics, lambda t: t.name) == 100 + 20 + 700 + 3
    names = {b"\x01" * 16: "t"}
    assert throttled_size(quota, topics[2:], lambda t: names.get(t.topic_id or b"")) == 50
