"""Topic → Parquet: every record once across restarts, partitioned by day."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

from strom.pipelines import AVAILABLE_NOW, Source, topic_to_parquet
from strom.testing import EmbeddedBroker
from tests.pipelines.helpers import Rec, finish, new_topic, produce, read_topic, text

DAY1 = 1_714_564_800_000  # 2024-05-01T12:00:00Z
DAY2 = DAY1 + 86_400_000


def _records(start: int, count: int) -> list[Rec]:
    return [Rec(f"v{i}".encode(), f"k{i}".encode(), partition=i % 2,
                timestamp=(DAY1 if i % 3 else DAY2) + i) for i in range(start, start + count)]


def test_records_land_once_in_daily_parquet_files(
        spark: Any, broker: EmbeddedBroker, tmp_path: Path) -> None:
    # The records are from 2024: without this the broker's time retention, which may run at
    # any moment, can delete the first ones before the second check reads the topic.
    topic = new_topic(broker.bootstrap, "pq", configs={"retention.ms": "-1"})
    out, source = tmp_path / "out", Source(broker.bootstrap, (topic,))

    def run_and_read() -> list[tuple[Any, ...]]:
        finish(topic_to_parquet(spark, source, out, tmp_path / "cp", AVAILABLE_NOW,
                                partition_by_date=True))
        rows = spark.read.parquet(str(out)).collect()
        # PySpark gives naive local datetimes; .timestamp() takes them back to epoch time.
        return sorted((r.key, r.value, r.topic, r.partition, r.offset,
                       round(r.timestamp.timestamp() * 1000), r.date)
                      for r in rows)

    def expected() -> list[tuple[Any, ...]]:
        return sorted(
            (text(r.key), text(r.value), r.topic, r.partition, r.offset, r.timestamp,
             dt.datetime.fromtimestamp(r.timestamp / 1000, dt.UTC).date())
            for r in read_topic(broker.bootstrap, topic))

    produce(broker.bootstrap, topic, _records(0, 12))
    assert run_and_read() == expected()
    assert sorted(p.name for p in out.glob("date=*")) == ["date=2024-05-01", "date=2024-05-02"]

    produce(broker.bootstrap, topic, _records(12, 6))
    rows = run_and_read()
    assert rows == expected()
    assert len(rows) == 18
