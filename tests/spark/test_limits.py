"""Read-limit arithmetic and range splitting (pure functions)."""

from __future__ import annotations

import itertools
import random

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

from strom.common.types import TopicPartition
from strom.spark.limits import backlog, rate_limit, split_ranges

A, B, C = (TopicPartition("t", p) for p in range(3))


def test_rate_limit_splits_by_backlog() -> None:
    end = rate_limit({A: 0, B: 0, C: 5}, {A: 100, B: 50, C: 5}, 10)
    assert end == {A: 7, B: 3, C: 5}


def test_rate_limit_takes_everything_under_the_limit() -> None:
    assert rate_limit({A: 3, B: 0}, {A: 5, B: 1}, 10) == {A: 5, B: 1}


@pytest.mark.parametrize("seed", range(20))
def test_rate_limit_reads_exactly_the_limit(seed: int) -> None:
    rng = random.Random(seed)
    tps = [TopicPartition("t", p) for p in range(rng.randint(1, 8))]
    start = {tp: rng.randint(0, 100) for tp in tps}
    latest = {tp: start[tp] + rng.choice([0, 1, 2, rng.randint(0, 1000)]) for tp in tps}
    limit = rng.randint(1, 500)
    end = rate_limit(start, latest, limit)
    assert set(end) == set(latest)
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in tps)
    assert backlog(start, end) == min(limit, backlog(start, latest))


def test_split_ranges_reaches_min_partitions_contiguously() -> None:
    pieces = split_ranges({A: (0, 100), B: (0, 10), C: (3, 3)}, 5)
    assert len(pieces) >= 5
    for tp, (s, e) in ((A, (0, 100)), (B, (0, 10))):
        mine = [(ps, pe) for ptp, ps, pe in pieces if ptp == tp]
        assert mine[0][0] == s and mine[-1][1] == e
        assert all(a[1] == b[0] for a, b in itertools.pairwise(mine))
    assert all(tp != C for tp, _, _ in pieces)  # empty ranges make no task


def test_split_ranges_without_min_is_one_task_per_partition() -> None:
    assert split_ranges({A: (0, 10), B: (5, 6)}, None) == [(A, 0, 10), (B, 5, 6)]
    assert split_ranges({A: (0, 10), B: (5, 6)}, 2) == [(A, 0, 10), (B, 5, 6)]
