"""Windowed word count: tumbling and hopping windows on record timestamps, late records."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

from strom.pipelines import AVAILABLE_NOW, Endpoint, Source, windowed_word_count
from strom.pipelines.windowed import windowed_counts
from strom.testing import EmbeddedBroker
from tests.pipelines.helpers import (
    Rec,
    finish,
    latest_by_key,
    name,
    new_topic,
    produce,
    read_topic,
    words,
)

T0 = 1_714_564_800_000  # 2024-05-01T12:00:00Z, a multiple of every window size below
S = 1000


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def window_counts(records: list[tuple[int, str]], size_ms: int, slide_ms: int) -> dict[str, str]:
    """The expected ``word@start`` → count: every window containing each record."""
    counts: Counter[str] = Counter()
    for ts, line in records:
        start = ts - ts % slide_ms
        while start > ts - size_ms:
            counts.update(f"{w}@{iso(start)}" for w in words(line))
            start -= slide_ms
    return {k: str(v) for k, v in counts.items()}


def _produce(broker: EmbeddedBroker, topic: str, records: list[tuple[int, str]]) -> None:
    produce(broker.bootstrap, topic,
            [Rec(line.encode(), partition=i % 2, timestamp=ts)
             for i, (ts, line) in enumerate(records)])


def test_tumbling_windows_drop_records_behind_the_watermark(
        spark: Any, broker: EmbeddedBroker, tmp_path: Path) -> None:
    lines, out = new_topic(broker.bootstrap, "wlines"), name("wcounts")
    source, sink = Source(broker.bootstrap, (lines,)), Endpoint(broker.bootstrap, out)
    first = [(T0 + 1 * S, "a b"), (T0 + 2 * S, "a"), (T0 + 12 * S, "b c"), (T0 + 25 * S, "a")]
    _produce(broker, lines, first)

    def run() -> None:
        finish(windowed_word_count(spark, source, sink, tmp_path / "cp", AVAILABLE_NOW,
                                   size="10 seconds", watermark="5 seconds"))

    run()
    assert latest_by_key(read_topic(broker.bootstrap, out)) == window_counts(first, 10 * S, 10 * S)

    # The watermark is now T0+20s (latest event T0+25s minus 5s): the windows ending at or
    # before it are final, so records for them are dropped; the open window still counts.
    late = [(T0 + 3 * S, "a late"), (T0 + 14 * S, "b")]
    on_time = [(T0 + 22 * S, "c"), (T0 + 27 * S, "a")]
    _produce(broker, lines, late + on_time)
    run()
    assert latest_by_key(read_topic(broker.bootstrap, out)) == \
        window_counts(first + on_time, 10 * S, 10 * S)


def test_hopping_windows_count_a_record_in_every_window(spark: Any,
                                                       broker: EmbeddedBroker) -> None:
    """The aggregation on its own, over the topic read as one batch."""
    lines = new_topic(broker.bootstrap, "hlines")
    records = [(T0 + 1 * S, "x"), (T0 + 7 * S, "x y"), (T0 + 11 * S, "y")]
    _produce(broker, lines, records)
    batch = spark.read.format("strom").option("kafka.bootstrap.servers", broker.bootstrap) \
        .option("subscribe", lines).load()
    rows = windowed_counts(batch, "10 seconds", "5 seconds", "1 minute").collect()
    expected = window_counts(records, 10 * S, 5 * S)
    assert expected[f"x@{iso(T0)}"] == "2"
    assert {r.key: r.value for r in rows} == expected
    assert len(rows) == len(expected)
