"""Stream-table join: a compacted topic read as a table, updated and tombstoned between runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

from strom.pipelines import AVAILABLE_NOW, Endpoint, PipelineError, Source, stream_table_join
from strom.pipelines.join import join_with_table, read_table
from strom.testing import EmbeddedBroker
from tests.pipelines.helpers import Rec, finish, name, new_topic, produce, read_topic, text

COMPACT = {"cleanup.policy": "compact"}


def _table(broker: EmbeddedBroker, topic: str, rows: list[tuple[str, str | None]]) -> None:
    produce(broker.bootstrap, topic,
            [Rec(None if v is None else v.encode(), k.encode()) for k, v in rows])


def _stream(broker: EmbeddedBroker, topic: str, rows: list[tuple[str | None, str]]) -> None:
    produce(broker.bootstrap, topic, [Rec(v.encode(), None if k is None else k.encode(),
                                          partition=i % 2) for i, (k, v) in enumerate(rows)])


def _joined(broker: EmbeddedBroker, topic: str) -> list[tuple[str | None, str | None, str | None]]:
    out = []
    for r in read_topic(broker.bootstrap, topic):
        value = json.loads(text(r.value) or "null")
        out.append((text(r.key), value["stream"], value["table"]))
    return sorted(out, key=repr)


def _topics(broker: EmbeddedBroker) -> tuple[str, str, str]:
    table = new_topic(broker.bootstrap, "table", 1, COMPACT)
    _table(broker, table, [("k1", "alice"), ("k2", "bob"), ("k3", "carol"), ("k3", "carol2")])
    stream, out = new_topic(broker.bootstrap, "orders"), new_topic(broker.bootstrap, "joined")
    _stream(broker, stream, [("k1", "o1"), ("k2", "o2"), ("k4", "o4"), (None, "o5")])
    return table, stream, out


def test_left_join_sees_table_updates_and_tombstones(
        spark: Any, broker: EmbeddedBroker, tmp_path: Path) -> None:
    table, stream, out = _topics(broker)

    def run() -> None:
        finish(stream_table_join(spark, Source(broker.bootstrap, (stream,)),
                                 Endpoint(broker.bootstrap, table), Endpoint(broker.bootstrap, out),
                                 tmp_path / "cp", AVAILABLE_NOW, how="left"))

    run()
    first = [("k1", "o1", "alice"), ("k2", "o2", "bob"), ("k4", "o4", None), (None, "o5", None)]
    assert _joined(broker, out) == sorted(first, key=repr)

    _table(broker, table, [("k1", "alice2"), ("k2", None)])  # an update and a tombstone
    _stream(broker, stream, [("k1", "o6"), ("k2", "o7"), ("k3", "o8")])
    run()
    second = [("k1", "o6", "alice2"), ("k2", "o7", None), ("k3", "o8", "carol2")]
    assert _joined(broker, out) == sorted(first + second, key=repr)


def test_inner_join_drops_records_without_a_table_row(spark: Any,
                                                     broker: EmbeddedBroker) -> None:
    """The micro-batch step on its own: the stream topic read as one batch."""
    table, stream, _ = _topics(broker)
    batch = spark.read.format("strom").option("kafka.bootstrap.servers", broker.bootstrap) \
        .option("subscribe", stream).load().select("key", "value")
    rows = join_with_table(batch, read_table(spark, Endpoint(broker.bootstrap, table)),
                           "inner").collect()
    got = sorted((text(r.key), json.loads(r.value)) for r in rows)
    assert got == [("k1", {"stream": "o1", "table": "alice"}),
                   ("k2", {"stream": "o2", "table": "bob"})]


def test_unknown_join_type_is_rejected(spark: Any) -> None:
    endpoint = Endpoint("127.0.0.1:1", name("t"))
    with pytest.raises(PipelineError, match="join type"):
        stream_table_join(spark, Source("127.0.0.1:1", ("s",)), endpoint, endpoint, "cp",
                          how="outer")
