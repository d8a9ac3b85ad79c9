"""``strom pipeline``: run one of the stream-processing pipelines of :mod:`strom.pipelines`.

    strom pipeline word-count --input lines --output counts --checkpoint /var/cp/wc
    strom pipeline mirror --pattern 'orders\\..*' --output-bootstrap b:9092 --prefix a. ...

Builds a SparkSession (``--master``, UTC session time zone, ``--shuffle-partitions``,
``--conf``), starts the pipeline and waits: ``--available-now`` processes what is there and
exits, otherwise it runs until Ctrl-C or SIGTERM, which stop the query cleanly (a second
Ctrl-C gives up at once). Progress lines go to stderr. Spark's errors are reported as one
line. Needs ``pip install 'strom[spark]'``.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from strom.cli.common import DEFAULT_BOOTSTRAP, UsageError, parse_key_values, positive
from strom.common.errors import StromError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

DEFAULT_SHUFFLE_PARTITIONS = 4
DEFAULT_SQL_POLL = "5s"
_DURATION_MS = {"ms": 1, "s": 1000, "sec": 1000, "second": 1000, "seconds": 1000,
                "m": 60_000, "min": 60_000, "minute": 60_000, "minutes": 60_000,
                "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000,
                "d": 86_400_000, "day": 86_400_000, "days": 86_400_000}


class PipelineRunError(StromError):
    """Spark failed to run the pipeline (reported as one line)."""


def duration_ms(value: str) -> int:
    """argparse type: ``10s``, ``5 minutes``, ``500ms``, ``2h`` → milliseconds.

    (The data source's own parser lives in ``strom.spark``, which needs PySpark to import;
    this module must load without it.)
    """
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", value)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _DURATION_MS:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 10s, 5m or 500ms, got {value!r}")
    return int(match.group(1)) * _DURATION_MS[unit]


def spark_duration(ms: int) -> str:
    return f"{ms} milliseconds"


# -- arguments ----------------------------------------------------------------------------
def _common(p: argparse.ArgumentParser, *, sink: bool = True) -> None:
    p.add_argument("--bootstrap", "--bootstrap-server", "-b", dest="bootstrap",
                   default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT",
                   help=f"the strom cluster to read from (default {DEFAULT_BOOTSTRAP})")
    if sink:
        p.add_argument("--output-bootstrap", metavar="HOST:PORT",
                       help="the cluster to write to (default: --bootstrap)")
    p.add_argument("--checkpoint", required=True, metavar="DIR",
                   help="checkpoint directory; a run with the same one continues")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--available-now", action="store_true",
                      help="process what is there, then exit")
    when.add_argument("--interval", type=duration_ms, metavar="DURATION",
                      help="start a micro-batch every DURATION (10s, 1m); default: as soon "
                           "as new data arrives")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--shuffle-partitions", type=positive, default=DEFAULT_SHUFFLE_PARTITIONS,
                   metavar="N", help="spark.sql.shuffle.partitions: state partitions of "
                                     f"stateful pipelines (default {DEFAULT_SHUFFLE_PARTITIONS};"
                                     " fixed by the first run of a checkpoint)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="another Spark setting; repeatable")
    p.add_argument("--spark-log-level", default="FATAL", metavar="LEVEL",
                   help="Spark's own log level (default FATAL: errors are reported as one "
                        "line; WARN or INFO to debug)")


def _topics_in(p: argparse.ArgumentParser, what: str = "read") -> None:
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument("--input", metavar="TOPIC[,TOPIC]", help=f"topics to {what}")
    given.add_argument("--pattern", metavar="REGEX", help=f"{what} every topic whose whole "
                                                          "name matches REGEX")
    p.add_argument("--starting-offsets", default="earliest", metavar="WHERE",
                   help="earliest (default), latest or Spark's JSON; first run only")
    p.add_argument("--max-offsets-per-trigger", type=positive, metavar="N",
                   help="at most N records per micro-batch")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pipeline", help="run a stream-processing pipeline on Spark",
                       description="Run a pipeline of strom.pipelines on Spark Structured "
                                   "Streaming (needs pip install 'strom[spark]').")
    names = p.add_subparsers(dest="pipeline", metavar="PIPELINE")
    names.required = True

    wc = names.add_parser("word-count", help="words of a text topic → compacted counts topic")
    _topics_in(wc)
    wc.add_argument("--output", required=True, metavar="TOPIC", help="counts topic")
    wc.add_argument("--output-partitions", type=positive, metavar="N",
                    help="partitions of the counts topic if it is created")
    _common(wc)
    wc.set_defaults(run=run, start=_word_count)

    ww = names.add_parser("windowed-word-count", help="words per event-time window")
    _topics_in(ww)
    ww.add_argument("--output", required=True, metavar="TOPIC", help="counts topic")
    ww.add_argument("--size", type=duration_ms, default=60_000, metavar="DURATION",
                    help="window length (default 1m)")
    ww.add_argument("--slide", type=duration_ms, metavar="DURATION",
                    help="start a window every DURATION (hopping); default: --size (tumbling)")
    ww.add_argument("--watermark", type=duration_ms, default=60_000, metavar="DURATION",
                    help="how late records may arrive (default 1m)")
    ww.add_argument("--output-partitions", type=positive, metavar="N",
                    help="partitions of the counts topic if it is created")
    _common(ww)
    ww.set_defaults(run=run, start=_windowed)

    j = names.add_parser("join", help="stream topic joined with a compacted table topic")
    _topics_in(j)
    j.add_argument("--table", required=True, metavar="TOPIC", help="the table topic")
    j.add_argument("--output", required=True, metavar="TOPIC", help="joined records")
    j.add_argument("--how", choices=("inner", "left"), default="inner",
                   help="inner (default) or left join")
    _common(j)
    j.set_defaults(run=run, start=_join)

    pq = names.add_parser("topic-to-parquet", help="records → Parquet files")
    _topics_in(pq)
    pq.add_argument("--output", required=True, metavar="DIR", help="Parquet directory")
    pq.add_argument("--binary", action="store_true",
                    help="keep key and value binary (default: UTF-8 strings)")
    pq.add_argument("--partition-by-date", action="store_true",
                    help="one sub-directory per day (date=YYYY-MM-DD)")
    _common(pq, sink=False)
    pq.set_defaults(run=run, start=_parquet)

    f = names.add_parser("files-to-topic", help="rows of files in a directory → records")
    f.add_argument("--input", required=True, metavar="DIR", help="directory to watch")
    f.add_argument("--format", dest="file_format", default="json",
                   choices=("json", "csv", "parquet", "text"), help="file format (json)")
    f.add_argument("--schema", metavar="DDL", help="e.g. 'id long, name string' "
                                                   "(default: inferred from the files there)")
    f.add_argument("--key-column", metavar="COLUMN", help="column to use as the record key")
    f.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="Spark file-source option (header, sep, maxFilesPerTrigger, …)")
    f.add_argument("--output", required=True, metavar="TOPIC", help="topic to write")
    _common(f)
    f.set_defaults(run=run, start=_files)

    q = names.add_parser(
        "sql-to-topic", help="new rows of a SQLite table → records",
        description="Copy new rows (by an increasing column) of a SQLite table to a topic: "
                    "with --available-now everything there, then exit; otherwise poll every "
                    f"--interval (default {DEFAULT_SQL_POLL}) until stopped.")
    q.add_argument("--database", required=True, metavar="FILE", help="SQLite database file")
    origin = q.add_mutually_exclusive_group(required=True)
    origin.add_argument("--table", help="table to read")
    origin.add_argument("--query", metavar="SELECT", help="a SELECT to read instead")
    q.add_argument("--incrementing-column", required=True, metavar="COLUMN",
                   help="strictly increasing column (an id) that orders the rows")
    q.add_argument("--key-column", metavar="COLUMN", help="column to use as the record key")
    q.add_argument("--batch-size", type=positive, default=1000, metavar="N",
                   help="rows per poll (default 1000)")
    q.add_argument("--output", required=True, metavar="TOPIC", help="topic to write")
    _common(q, sink=False)
    q.set_defaults(run=run, start=None)

    m = names.add_parser(
        "mirror", help="copy topics to another cluster (MirrorMaker)",
        description="Copy topics from --bootstrap to --output-bootstrap (same partition, key, "
                    "value, headers), creating missing target topics.")
    _topics_in(m, "copy")
    m.add_argument("--prefix", default="", metavar="PREFIX",
                   help="target topic = PREFIX + source topic (e.g. 'a.'; default none)")
    _common(m)
    m.set_defaults(run=run, start=_mirror)


# -- pipelines ----------------------------------------------------------------------------
def _trigger(args: argparse.Namespace) -> Any:
    from strom.pipelines import Trigger

    if args.available_now:
        return Trigger(available_now=True)
    return Trigger(interval=spark_duration(args.interval or 0))


def _source(args: argparse.Namespace) -> Any:
    from strom.pipelines import Source

    topics = tuple(t.strip() for t in (args.input or "").split(",") if t.strip())
    if args.input is not None and not topics:
        raise UsageError("--input must name at least one topic")
    return Source(args.bootstrap, topics, args.pattern, args.starting_offsets,
                  args.max_offsets_per_trigger)


def _sink(args: argparse.Namespace, topic: str) -> Any:
    from strom.pipelines import Endpoint

    return Endpoint(getattr(args, "output_bootstrap", None) or args.bootstrap, topic)


def _word_count(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    from strom.pipelines import word_count

    return word_count(spark, _source(args), _sink(args, args.output), args.checkpoint,
                      _trigger(args), output_partitions=args.output_partitions or -1)


def _windowed(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    from strom.pipelines import windowed_word_count

    return windowed_word_count(
        spark, _source(args), _sink(args, args.output), args.checkpoint, _trigger(args),
        size=spark_duration(args.size),
        slide=spark_duration(args.slide) if args.slide else None,
        watermark=spark_duration(args.watermark),
        output_partitions=args.output_partitions or -1)


def _join(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    from strom.pipelines import Endpoint, stream_table_join

    return stream_table_join(spark, _source(args), Endpoint(args.bootstrap, args.table),
                             _sink(args, args.output), args.checkpoint, _trigger(args),
                             how=args.how)


def _parquet(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    from strom.pipelines import topic_to_parquet

    return topic_to_parquet(spark, _source(args), args.output, args.checkpoint,
                            _trigger(args), strings=not args.binary,
                            partition_by_date=args.partition_by_date)


def _files(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    from strom.pipelines import files_to_topic

    return files_to_topic(spark, args.input, _sink(args, args.output), args.checkpoint,
                          _trigger(args), file_format=args.file_format, schema=args.schema,
                          key_column=args.key_column,
                          options=parse_key_values(args.option, "--option"))


def _mirror(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    from strom.pipelines import MirrorTarget, mirror

    target = MirrorTarget(args.output_bootstrap or args.bootstrap, args.prefix)
    return mirror(spark, _source(args), target, args.checkpoint, _trigger(args))


def _sql(spark: SparkSession, args: argparse.Namespace, stop: threading.Event) -> int:
    from strom.pipelines import Endpoint, SqlProgress, SqlSource, sql_to_topic

    source = SqlSource(args.database, args.incrementing_column, args.table, args.query,
                       args.key_column, args.batch_size)
    interval_ms = duration_ms(DEFAULT_SQL_POLL) if args.interval is None else args.interval
    interval = None if args.available_now else interval_ms / 1000

    def report(progress: SqlProgress) -> None:
        _say(f"batch {progress.batches}: {progress.rows} rows so far, last "
             f"{args.incrementing_column} = {progress.last_value}")

    done = sql_to_topic(spark, source, Endpoint(args.bootstrap, args.output), args.checkpoint,
                        poll_interval_s=interval, stop=stop, on_batch=report)
    _say(f"{'stopped' if stop.is_set() else 'done'}: {done.rows} rows in {done.batches} "
         "batches")
    return 0


# -- running ------------------------------------------------------------------------------
def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _require_spark() -> None:
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise UsageError(f"strom pipeline needs PySpark ({exc.name} is not installed): "
                         "pip install 'strom[spark]'") from None


def _session(args: argparse.Namespace) -> tuple[SparkSession, bool]:
    """The SparkSession, and whether it was created here (then it is stopped here too).

    An active session (``main()`` called from a notebook or a test) is reused: it gets the
    time zone and shuffle partitions set here, and is left running afterwards.
    """
    from pyspark.sql import SparkSession

    from strom.spark.worker_python import check_worker_python

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors run this Python
    existing = SparkSession.getActiveSession()
    builder = SparkSession.builder.master(args.master) \
        .appName(f"strom-pipeline-{args.pipeline}") \
        .config("spark.sql.session.timeZone", "UTC") \
        .config("spark.sql.shuffle.partitions", str(args.shuffle_partitions)) \
        .config("spark.ui.showConsoleProgress", "false")
    for key, value in parse_key_values(args.conf).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if existing is None:
        spark.sparkContext.setLogLevel(args.spark_log_level.upper())
    try:
        check_worker_python(spark)  # else Spark says only DATA_SOURCE_NOT_FOUND: strom
    except StromError:
        if existing is None:
            spark.stop()
        raise
    return spark, existing is None


@contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """An event set by the first Ctrl-C / SIGTERM; a second one interrupts at once."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handle(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        _say("stopping (the current micro-batch finishes first)…")
        stop.set()

    previous = {s: signal.signal(s, handle) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _follow(query: StreamingQuery, stop: threading.Event) -> None:
    from strom.pipelines import await_query

    totals = {"batches": 0, "rows": 0}

    def report(progress: Any) -> None:
        rows = int(progress.get("numInputRows", 0))
        totals["batches"] += 1
        totals["rows"] += rows
        took = progress.get("durationMs", {}).get("triggerExecution")
        _say(f"batch {progress['batchId']}: {rows} input rows"
             + (f" in {took} ms" if took is not None else ""))

    await_query(query, stop=stop, on_progress=report)
    _say(f"{'stopped' if stop.is_set() else 'done'}: {totals['batches']} batches, "
         f"{totals['rows']} input rows")


def spark_error(exc: BaseException) -> str:
    """A Spark / Py4J error as one line: the first (root) Python exception of a traceback
    inside the message, or else its first line without Spark's query banner and SQLSTATE."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines)
                  if "Traceback (most recent call last)" in line), None)
    if start is not None:
        for line in lines[start + 1:]:
            if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)\b[^:\s]*: ", line):
                return re.sub(r"^(?:[a-z_]\w*\.)+", "", line)
    first = lines[0] if lines else type(exc).__name__
    first = re.sub(r"^\[STREAM_FAILED\] Query \[[^]]*\] terminated with exception: ", "",
                   first)
    return re.sub(r"\s*SQLSTATE: \w+\s*$", "", first)


def _is_spark_error(exc: BaseException) -> bool:
    return type(exc).__module__.split(".")[0] in ("pyspark", "py4j")


def run(args: argparse.Namespace) -> int:
    _require_spark()
    # A failing foreachBatch function is reported once, as the query's error, not also
    # logged with its traceback by py4j.
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    spark: SparkSession | None = None
    own = False
    try:
        spark, own = _session(args)
        # After the session: creating a SparkContext installs PySpark's own SIGINT handler.
        with _stop_on_signals() as stop:
            start: Callable[[SparkSession, argparse.Namespace], StreamingQuery] | None = \
                args.start
            if start is None:
                return _sql(spark, args, stop)
            query = start(spark, args)
            _say(f"strom pipeline {args.pipeline}: started (checkpoint {args.checkpoint})"
                 + ("" if args.available_now else "; Ctrl-C to stop"))
            _follow(query, stop)
            return 0
    except StromError:
        raise
    except Exception as exc:
        if not _is_spark_error(exc):
            raise
        raise PipelineRunError(spark_error(exc)) from None
    finally:
        if spark is not None and own:
            spark.stop()
