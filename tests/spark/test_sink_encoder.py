"""SinkEncoder: Arrow sink rows → per topic, per partition records sections (no Spark, no
broker; the sections are decoded with the project's record reader)."""

from __future__ import annotations

import datetime

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

import pyarrow as pa

from strom.client.partitioner import key_partition
from strom.protocol.records.reader import decode_batches
from strom.spark.options import StromSourceOptionError
from strom.spark.sink_encoder import GROUP_ROWS, SinkEncoder, coalesced

UTC = datetime.UTC


def _records(sections: list[tuple[int, object]]) -> list[tuple[int, object, object, int]]:
    return [(partition, r.key, r.value, r.timestamp)
            for partition, section in sections
            for _, records in decode_batches(section.seal())  # type: ignore[attr-defined]
            for r in records]


def test_topic_column_splits_rows_and_counts_are_asked_once_per_topic() -> None:
    asked: list[str] = []

    def count(topic: str) -> int:
        asked.append(topic)
        return {"a": 3, "b": 1}[topic]

    encoder = SinkEncoder(None, 16384, count)
    batch = pa.record_batch({
        "topic": ["b", "a", "b", "a"], "key": ["k0", "k1", None, "k3"],
        "value": [b"0", None, b"2", b"3"],
        "timestamp": pa.array([datetime.datetime(1970, 1, 1, 0, 0, 0, 1_999, UTC),
                               None, datetime.datetime(2026, 1, 1, tzinfo=UTC), None],
                              pa.timestamp("us", tz="UTC"))})
    for _ in range(2):
        encoded = encoder.encode(batch, now_ms=42)
        assert [topic for topic, _ in encoded] == ["b", "a"]
        by_topic = {topic: _records(sections) for topic, sections in encoded}
        assert by_topic["b"] == [(0, b"k0", b"0", 1), (0, None, b"2", 1_767_225_600_000)]
        assert sorted(by_topic["a"]) == sorted([(key_partition(b"k1", 3), b"k1", None, 42),
                                                (key_partition(b"k3", 3), b"k3", b"3", 42)])
    assert asked == ["b", "a"]


def test_timestamps_before_1970_are_refused() -> None:
    batch = pa.record_batch({"value": [b"v"], "timestamp": pa.array(
        [datetime.datetime(1969, 12, 31, 23, 59, 59, 999_500, UTC)], pa.timestamp("us", tz="UTC"))})
    with pytest.raises(StromSourceOptionError, match="before 1970"):
        SinkEncoder("t", 16384, lambda t: 1).encode(batch)


def test_topic_option_wins_and_a_null_topic_is_refused() -> None:
    batch = pa.record_batch({"topic": [None, "x"], "value": [b"v", b"w"]})
    [(topic, sections)] = SinkEncoder("opt", 16384, lambda t: 1).encode(batch, now_ms=0)
    assert topic == "opt" and len(_records(sections)) == 2
    with pytest.raises(StromSourceOptionError, match="null topic"):
        SinkEncoder(None, 16384, lambda t: 1).encode(batch)


def test_batches_are_coalesced_in_order_and_empty_ones_dropped() -> None:
    small = pa.record_batch({"value": [b"x"] * 1000})
    empty = small.slice(0, 0)
    groups = list(coalesced(iter([empty, *[small] * (GROUP_ROWS // 1000 + 5), empty])))
    assert [g.num_rows for g in groups] == [(GROUP_ROWS // 1000 + 1) * 1000, 4000]
    assert list(coalesced(iter([empty]))) == []
