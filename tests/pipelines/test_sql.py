"""SQLite → topic, incrementally: one-shot runs across restarts, and the polling loop."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

from strom.pipelines import Endpoint, PipelineError, SqlProgress, SqlSource, sql_to_topic
from strom.pipelines.sql import STATE_FILE, select_statement
from strom.testing import EmbeddedBroker
from tests.pipelines.helpers import new_topic, read_topic, text


def _database(path: Path) -> Path:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT, amount REAL, "
                   "blob BLOB)")
    return path


def _insert(path: Path, ids: range) -> None:
    with sqlite3.connect(path) as db:
        db.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)",
                       [(i, f"c{i % 3}", i * 1.5, b"\x00\x01" if i == 1 else None) for i in ids])


def _expected(ids: range) -> list[tuple[str, dict[str, Any]]]:
    return [(f"c{i % 3}", {"id": i, "customer": f"c{i % 3}", "amount": i * 1.5,
                           "blob": "AAE=" if i == 1 else None}) for i in ids]


def _records(broker: EmbeddedBroker, topic: str) -> list[tuple[str | None, dict[str, Any]]]:
    return sorted(((text(r.key), json.loads(text(r.value) or "null"))
                   for r in read_topic(broker.bootstrap, topic)), key=lambda kv: kv[1]["id"])


def test_rows_are_copied_once_across_runs(spark: Any, broker: EmbeddedBroker,
                                          tmp_path: Path) -> None:
    db = _database(tmp_path / "shop.db")
    _insert(db, range(1, 6))
    topic = new_topic(broker.bootstrap, "orders", 1)
    source = SqlSource(db, "id", table="orders", key_column="customer", batch_size=2)
    sink, checkpoint = Endpoint(broker.bootstrap, topic), tmp_path / "cp"

    first = sql_to_topic(spark, source, sink, checkpoint)
    assert (first.batches, first.rows, first.last_value) == (3, 5, 5)
    assert _records(broker, topic) == _expected(range(1, 6))
    state = json.loads((checkpoint / STATE_FILE).read_text())
    assert state["last_value"] == 5

    _insert(db, range(6, 9))
    second = sql_to_topic(spark, source, sink, checkpoint)
    assert (second.rows, second.last_value) == (3, 8)
    assert _records(broker, topic) == _expected(range(1, 9))
    assert sql_to_topic(spark, source, sink, checkpoint).rows == 0  # nothing new


def test_polling_picks_up_new_rows_until_stopped(spark: Any, broker: EmbeddedBroker,
                                                 tmp_path: Path) -> None:
    db = _database(tmp_path / "shop.db")
    _insert(db, range(1, 3))
    topic = new_topic(broker.bootstrap, "polled", 1)
    source = SqlSource(db, "id", query="SELECT id, customer, amount, blob FROM orders;")
    stop, seen = threading.Event(), []

    def on_batch(progress: SqlProgress) -> None:
        seen.append(progress.last_value)

    result: list[SqlProgress] = []
    runner = threading.Thread(target=lambda: result.append(sql_to_topic(
        spark, source, Endpoint(broker.bootstrap, topic), tmp_path / "cp", poll_interval_s=0.1,
        stop=stop, on_batch=on_batch)))
    runner.start()
    try:
        deadline = time.monotonic() + 60
        while 2 not in seen:
            assert time.monotonic() < deadline and runner.is_alive()
            time.sleep(0.05)
        _insert(db, range(3, 5))
        while 4 not in seen:
            assert time.monotonic() < deadline and runner.is_alive()
            time.sleep(0.05)
    finally:
        stop.set()
        runner.join(60)
    assert result and result[0].rows == 4
    assert [v for _, v in _records(broker, topic)] == [v for _, v in _expected(range(1, 5))]


def test_select_statements() -> None:
    table = SqlSource("x.db", "id", table='we"ird', batch_size=10)
    assert select_statement(table, first=True) == \
        'SELECT * FROM "we""ird" AS src WHERE "id" IS NOT NULL ORDER BY "id" LIMIT 10'
    query = SqlSource("x.db", "n", query="SELECT n FROM t; ")
    assert select_statement(query, first=False) == \
        'SELECT * FROM (SELECT n FROM t) AS src WHERE "n" > ? ORDER BY "n" LIMIT 1000'


def test_a_checkpoint_of_another_source_is_refused(spark: Any, tmp_path: Path) -> None:
    db = _database(tmp_path / "shop.db")
    sink = Endpoint("127.0.0.1:1", "t")
    (tmp_path / "cp").mkdir()
    (tmp_path / "cp" / STATE_FILE).write_text(json.dumps(
        {"source": {"table": "other", "query": None, "column": "id"}, "last_value": 3}))
    with pytest.raises(PipelineError, match="another SQL source"):
        sql_to_topic(spark, SqlSource(db, "id", table="orders"), sink, tmp_path / "cp")
    with pytest.raises(PipelineError, match="table or a query"):
        SqlSource(db, "id")
