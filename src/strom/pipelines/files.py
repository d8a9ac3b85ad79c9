"""Files → topic: rows of files dropped into a directory, one record each (Connect's file
source use case).

Reads the files of ``path`` with Spark's streaming file source in ``format`` ``json`` (JSON
lines), ``csv`` (with a header line unless ``options`` say otherwise), ``parquet`` or
``text``. The schema is ``schema`` (a DDL string such as ``"id long, name string"``) or, when
omitted, inferred from the files already there (the directory must then hold at least one;
later files must fit that schema). ``text`` has the fixed schema ``value string``.

Each row becomes one record: value = the row as a JSON object (``{"id":1,"name":"a"}``,
nulls included as ``null``) — for ``text``, the line itself; key = the ``key_column``'s
value as a string, or none.

Restarts and delivery: the checkpoint lists the files already processed, so each file is
read once across restarts; the ``strom`` sink is at-least-once, so a micro-batch replayed
after a crash may write its records again. Put complete files into the directory atomically
(write elsewhere, then move in) and do not change them afterwards: Spark reads a file once,
when it first sees it. ``options`` go to Spark's file source (``maxFilesPerTrigger``,
``sep``, ``multiLine``, …).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import StructType

from strom.pipelines.common import CONTINUOUS, FORMAT, Endpoint, PipelineError, Trigger, start

FILE_FORMATS = ("json", "csv", "parquet", "text")
DEFAULT_OPTIONS: Mapping[str, Mapping[str, str]] = {"csv": {"header": "true"}}


def infer_schema(spark: SparkSession, path: str, file_format: str,
                 options: Mapping[str, str]) -> StructType:
    """The schema of the files already in ``path`` (a batch read, as Spark would infer it)."""
    reader = spark.read.format(file_format).options(**options)
    if file_format == "csv":
        reader = reader.option("inferSchema", "true")
    try:
        schema = reader.load(path).schema
    except AnalysisException as exc:
        raise PipelineError(f"cannot infer the schema of the {file_format} files in {path}: "
                            f"{str(exc).splitlines()[0]}; give the schema") from None
    if not schema.fields:
        raise PipelineError(f"no {file_format} files in {path} to infer the schema from; "
                            "give the schema")
    return schema


def file_records(rows: DataFrame, file_format: str, key_column: str | None) -> DataFrame:
    """``(key, value)`` records of file rows (only ``value`` without a key column)."""
    if key_column is not None and key_column not in rows.columns:
        raise PipelineError(f"key column {key_column!r} is not a column of the files "
                            f"({', '.join(rows.columns)})")
    value = (F.col("value") if file_format == "text"
             else F.to_json(F.struct(*[F.col(c) for c in rows.columns]),
                            {"ignoreNullFields": "false"}))
    if key_column is None:
        return rows.select(value.alias("value"))
    return rows.select(F.col(key_column).cast("string").alias("key"), value.alias("value"))


def files_to_topic(spark: SparkSession, path: str | Path, sink: Endpoint,
                   checkpoint: str | Path, trigger: Trigger = CONTINUOUS, *,
                   file_format: str = "json", schema: str | None = None,
                   key_column: str | None = None,
                   options: Mapping[str, str] | None = None) -> StreamingQuery:
    """Start sending the rows of the files in ``path`` to ``sink``; returns the query."""
    if file_format not in FILE_FORMATS:
        raise PipelineError(f"file format must be one of {', '.join(FILE_FORMATS)}, "
                            f"got {file_format!r}")
    where = str(path)
    read_options = {**DEFAULT_OPTIONS.get(file_format, {}), **(options or {})}
    reader = spark.readStream.format(file_format).options(**read_options)
    if file_format != "text":
        reader = reader.schema(schema if schema is not None
                               else infer_schema(spark, where, file_format, read_options))
    records = file_records(reader.load(where), file_format, key_column)
    writer = records.writeStream.format(FORMAT).options(**sink.writer_options())
    return start(writer, checkpoint, trigger)
