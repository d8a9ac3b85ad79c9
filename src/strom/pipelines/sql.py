"""SQL database → topic, incrementally: Kafka Connect's JDBC source in ``incrementing`` mode,
for SQLite databases (Python's ``sqlite3``; JDBC drivers are not needed).

Each poll runs ``SELECT * FROM <table or (query)> WHERE <column> > ? ORDER BY <column>
LIMIT <batch_size>`` (the first poll, with nothing stored yet: ``WHERE <column> IS NOT
NULL``) on a read-only connection, writes the rows to the topic with the ``strom`` batch
writer through a Spark DataFrame, and only then stores the last row's ``<column>`` value in
``<checkpoint>/sql-source.json`` (written atomically; the checkpoint must be a local
directory). A restart continues after the stored value.

Records: value = the row as a JSON object in column order (``{"id":1,"name":"a"}``; BLOBs as
base64 strings, NULL as ``null``); key = the ``key_column``'s value as text (BLOBs base64),
or none. Each poll's rows are written by one Spark task, so records of a topic partition are in
the incrementing column's order.

Delivery: at-least-once — a crash after a write and before the state file is replaced
writes those rows again on restart. As in Connect's incrementing mode, the column must be
unique and only ever increase: rows updated in place are not seen again, and a row that
commits with a value below one already read (concurrent writers) is missed.

Runs: ``poll_interval_s=None`` reads everything there is, batch after batch, and returns;
otherwise it polls every ``poll_interval_s`` seconds (at once again after a full batch)
until ``stop`` is set.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from strom.pipelines.common import Endpoint, PipelineError, write_batch

STATE_FILE = "sql-source.json"
Scalar = int | float | str | None


@dataclass(frozen=True, slots=True)
class SqlSource:
    """A SQLite table (``table``) or ``SELECT`` (``query``) read in ``incrementing_column``
    order, ``batch_size`` rows per poll."""

    database: str | Path
    incrementing_column: str
    table: str | None = None
    query: str | None = None
    key_column: str | None = None
    batch_size: int = 1000

    def __post_init__(self) -> None:
        if bool(self.table) == bool(self.query):
            raise PipelineError("a SQL source needs either a table or a query (not both)")
        if self.batch_size < 1:
            raise PipelineError(f"batch size must be positive, got {self.batch_size}")
        if not self.incrementing_column:
            raise PipelineError("a SQL source needs an incrementing column")

    def identity(self) -> dict[str, str | None]:
        """What a checkpoint's state must match (the database file may move)."""
        return {"table": self.table, "query": self.query, "column": self.incrementing_column}


@dataclass
class SqlProgress:
    """What a run has done so far: batches and rows written, the last value stored."""

    batches: int = 0
    rows: int = 0
    last_value: Scalar = None


def quote(identifier: str) -> str:
    """``name`` as an SQL identifier (double quotes, embedded ones doubled)."""
    return '"' + identifier.replace('"', '""') + '"'


def select_statement(source: SqlSource, *, first: bool) -> str:
    """The poll's SELECT: rows after the last value (``?``), in order, ``batch_size`` of them."""
    if source.table:
        origin = quote(source.table)
    else:
        origin = f"({(source.query or '').strip().rstrip(';')})"
    column = quote(source.incrementing_column)
    where = f"{column} IS NOT NULL" if first else f"{column} > ?"
    return (f"SELECT * FROM {origin} AS src WHERE {where} ORDER BY {column} "
            f"LIMIT {source.batch_size}")


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


def _text(value: Any) -> str | None:
    value = _json_value(value)
    return None if value is None else str(value)


def to_records(names: Sequence[str], rows: Sequence[Sequence[Any]],
               key_column: str | None) -> list[tuple[str | None, str]]:
    """``(key, value)`` for each row (see the module)."""
    key_at = names.index(key_column) if key_column is not None else None
    return [(None if key_at is None else _text(row[key_at]),
             json.dumps({n: _json_value(v) for n, v in zip(names, row, strict=True)},
                        separators=(",", ":"), ensure_ascii=False))
            for row in rows]


def load_state(checkpoint: Path, source: SqlSource) -> Scalar:
    """The last value stored in ``checkpoint`` (None: nothing written yet)."""
    path = checkpoint / STATE_FILE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise PipelineError(f"{path} is not a valid state file: {exc}") from None
    if state.get("source") != source.identity():
        raise PipelineError(f"checkpoint {checkpoint} belongs to another SQL source "
                            f"({state.get('source')}); use a new checkpoint directory")
    value: Scalar = state.get("last_value")
    return value


def save_state(checkpoint: Path, source: SqlSource, last_value: Scalar) -> None:
    """Replace the state file atomically (write a temporary file, fsync, rename)."""
    checkpoint.mkdir(parents=True, exist_ok=True)
    path = checkpoint / STATE_FILE
    temporary = path.with_suffix(".tmp")
    with temporary.open("w", encoding="utf-8") as out:
        json.dump({"source": source.identity(), "last_value": last_value}, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)


def connect(database: str | Path) -> sqlite3.Connection:
    """A read-only connection (the database file must exist)."""
    path = Path(database).resolve()
    if not path.is_file():
        raise PipelineError(f"SQLite database {database} does not exist")
    return sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)


def fetch(db: sqlite3.Connection, source: SqlSource,
          after: Scalar) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The next rows after ``after`` (column names, rows)."""
    params: tuple[Scalar, ...] = () if after is None else (after,)
    try:
        cursor = db.execute(select_statement(source, first=after is None), params)
        rows = cursor.fetchall()
    except sqlite3.Error as exc:
        raise PipelineError(f"{source.database}: {exc}") from None
    names = [d[0] for d in cursor.description]
    for column in (source.incrementing_column, source.key_column):
        if column is not None and column not in names:
            raise PipelineError(f"column {column!r} is not in the rows read "
                                f"({', '.join(names)})")
    if rows and not isinstance(rows[-1][names.index(source.incrementing_column)],
                               int | float | str):
        raise PipelineError(f"incrementing column {source.incrementing_column!r} must hold "
                            "numbers or text")
    return names, rows


def sql_to_topic(spark: SparkSession, source: SqlSource, sink: Endpoint,
                 checkpoint: str | Path, *, poll_interval_s: float | None = None,
                 stop: threading.Event | None = None,
                 on_batch: Callable[[SqlProgress], None] | None = None) -> SqlProgress:
    """Copy new rows of ``source`` to ``sink`` (see the module); returns what was done."""
    state_dir = Path(checkpoint)
    stop = stop or threading.Event()
    progress = SqlProgress(last_value=load_state(state_dir, source))
    schema = "value string" if source.key_column is None else "key string, value string"
    with closing(connect(source.database)) as db:
        while not stop.is_set():
            names, rows = fetch(db, source, progress.last_value)
            if rows:
                records = to_records(names, rows, source.key_column)
                data = [(v,) for _, v in records] if source.key_column is None else records
                # One Spark partition: the rows reach each topic partition in column order.
                write_batch(spark.createDataFrame(data, schema).coalesce(1), sink)
                last: Scalar = rows[-1][names.index(source.incrementing_column)]
                save_state(state_dir, source, last)
                progress.batches += 1
                progress.rows += len(rows)
                progress.last_value = last
                if on_batch is not None:
                    on_batch(progress)
            if len(rows) == source.batch_size:
                continue  # more may be waiting
            if poll_interval_s is None or stop.wait(poll_interval_s):
                break
    return progress
