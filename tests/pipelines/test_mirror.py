"""Mirror between two real brokers: keys, values, headers and partitions; new topics."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

from strom.pipelines import AVAILABLE_NOW, MirrorTarget, PipelineError, Source, mirror
from strom.testing import EmbeddedBroker
from tests.pipelines.helpers import (
    Rec,
    finish,
    name,
    new_topic,
    partition_counts,
    produce,
    read_topic,
    topic_config,
)


@pytest.fixture
def target() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as second:
        yield second


KEEP_FOREVER = str(10_000 * 365 * 86_400_000)  # a non-default value the mirror must copy
UNLIMITED = {"retention.ms": "-1"}


def _records(start: int, count: int, partitions: int) -> list[Rec]:
    return [Rec(f"v{i}".encode(), f"k{i}".encode() if i % 4 else None, i % partitions,
                timestamp=1_600_000_000_000 + i * 1000,
                headers=(("trace", f"t{i}".encode()), ("empty", None)) if i % 2 else ())
            for i in range(start, start + count)]


def _content(bootstrap: str, topic: str) -> list[tuple[Any, ...]]:
    """What must survive mirroring: per partition, the order of (key, value, headers,
    timestamp)."""
    return [(r.partition, r.key, r.value, tuple(r.headers), r.timestamp)
            for r in read_topic(bootstrap, topic)]


def test_pattern_mirror_keeps_records_and_creates_new_topics(
        spark: Any, broker: EmbeddedBroker, target: EmbeddedBroker, tmp_path: Path) -> None:
    base = name("mir")
    # The records are from 2020: time retention must not delete them between a write and
    # its check (the broker's retention pass may run at any moment), here or once mirrored.
    a = new_topic(broker.bootstrap, partitions=2, configs={"retention.ms": KEEP_FOREVER},
                  topic=f"{base}-a")
    b = new_topic(broker.bootstrap, partitions=3, configs=UNLIMITED, topic=f"{base}-b")
    produce(broker.bootstrap, a, _records(0, 10, 2))
    produce(broker.bootstrap, b, _records(0, 9, 3))
    source = Source(broker.bootstrap, pattern=f"{base}-.*")
    to = MirrorTarget(target.bootstrap, prefix="src.")

    def run() -> None:
        finish(mirror(spark, source, to, tmp_path / "cp", AVAILABLE_NOW))

    run()
    assert partition_counts(target.bootstrap, [f"src.{a}", f"src.{b}"]) == \
        {f"src.{a}": 2, f"src.{b}": 3}
    assert topic_config(target.bootstrap, f"src.{a}", "retention.ms") == KEEP_FOREVER
    for topic in (a, b):
        assert _content(target.bootstrap, f"src.{topic}") == _content(broker.bootstrap, topic)

    c = new_topic(broker.bootstrap, partitions=4, configs=UNLIMITED,
                  topic=f"{base}-c")  # appears after the start
    produce(broker.bootstrap, c, _records(0, 8, 4))
    produce(broker.bootstrap, a, _records(10, 6, 2))
    run()
    assert partition_counts(target.bootstrap, [f"src.{c}"]) == {f"src.{c}": 4}
    for topic in (a, b, c):
        assert _content(target.bootstrap, f"src.{topic}") == _content(broker.bootstrap, topic)


def test_mirroring_into_the_same_cluster_needs_a_prefix(spark: Any) -> None:
    with pytest.raises(PipelineError, match="prefix"):
        mirror(spark, Source("127.0.0.1:1", ("t",)), MirrorTarget("127.0.0.1:1"), "cp")
