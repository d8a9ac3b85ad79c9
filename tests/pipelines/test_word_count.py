"""Word count into a compacted counts topic, across a restart from the checkpoint."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

from strom.pipelines import AVAILABLE_NOW, Endpoint, Source, word_count
from strom.testing import EmbeddedBroker
from tests.pipelines.helpers import (
    finish,
    latest_by_key,
    name,
    new_topic,
    produce_values,
    read_topic,
    text,
    topic_config,
    words,
)

FIRST = ["The quick brown fox", "jumps over the lazy dog; THE END.", "", "Café café, cafe!"]
SECOND = ["the fox again", "a new word: zebra", "dog dog dog"]


def test_counts_continue_across_restarts(spark: Any, broker: EmbeddedBroker,
                                         tmp_path: Path) -> None:
    lines = new_topic(broker.bootstrap, "lines")
    counts = name("counts")  # created by the pipeline, compacted
    source, sink = Source(broker.bootstrap, (lines,)), Endpoint(broker.bootstrap, counts)
    produce_values(broker.bootstrap, lines, FIRST)
    finish(word_count(spark, source, sink, tmp_path / "cp", AVAILABLE_NOW))

    expected = Counter(w for line in FIRST for w in words(line))
    first = read_topic(broker.bootstrap, counts)
    assert latest_by_key(first) == {w: str(c) for w, c in expected.items()}
    assert len(first) == len(expected)  # one micro-batch: each word written once
    assert topic_config(broker.bootstrap, counts, "cleanup.policy") == "compact"

    produce_values(broker.bootstrap, lines, SECOND)
    finish(word_count(spark, source, sink, tmp_path / "cp", AVAILABLE_NOW))
    expected.update(w for line in SECOND for w in words(line))
    everything = read_topic(broker.bootstrap, counts)
    assert latest_by_key(everything) == {w: str(c) for w, c in expected.items()}
    # The restart wrote only the words whose counts changed, with their new totals.
    changed = {text(r.key) for r in everything[len(first):]} if len(everything) else set()
    assert changed == {w for line in SECOND for w in words(line)}
