"""Spark on strom: streaming ingest, the writer, and the word-count pipeline, measured.

    python bench/spark_bench.py --records 5000000 [--partitions 4] [--out FILE]

Ingest: a strom topic of 100-byte values is read by a Structured Streaming query
(``Trigger.AvailableNow``, ``noop`` sink) — and, in the same run, the same rows from Parquet
files by the same kind of query: records/s and CPU-seconds per million records of the Spark
processes (driver JVM and its Python workers) plus, for strom, the broker's CPU.
Writer: a DataFrame of the same size written with ``format("strom")`` (batch), records/s
(the second of two writes, the first warming the JVM and the Python workers), and its ratio
to the strom ingest of the same run (the machine is shared: ratios are steadier).
Exactly-once writer (phase ``eoswriter``): the same with ``exactlyOnce`` (one transaction per
task), the second of two writes (the first warms the JVM and the Python workers).
Word count: ``strom.pipelines`` word count over lines of text, end-to-end records/s.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from brokers import CLK_TCK, RunningBroker, start_strom  # type: ignore[import-not-found]

VALUE = b"x" * 100


def tree_cpu_seconds(root: int) -> float:
    """utime + stime of ``root`` and every live descendant (from /proc)."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        total += times.get(pid, 0.0)
        stack.extend(child for child, parent in parents.items() if parent == pid)
    return total


@dataclass
class Result:
    name: str
    records: int
    seconds: float
    spark_cpu: float
    broker_cpu: float | None = None

    @property
    def rate(self) -> float:
        return self.records / self.seconds

    def row(self) -> str:
        broker = (f"{self.broker_cpu / self.records * 1e6:.2f}"
                  if self.broker_cpu is not None else "-")
        return (f"| {self.name} | {self.records:,} | {self.seconds:.2f} | {self.rate:,.0f} | "
                f"{self.spark_cpu / self.records * 1e6:.2f} | {broker} |")


def produce(broker: RunningBroker, topic: str, n: int, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20,
                         "batch.size": 1_000_000, "compression.type": "none",
                         "queue.buffering.max.messages": 1_000_000})
    key = b"k"
    for i in range(n):
        while True:
            try:
                producer.produce(topic, VALUE, key + str(i % 1000).encode(),
                                 partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 20000 == 0:
            producer.poll(0)
    if producer.flush(300):
        raise RuntimeError("records not delivered")


def timed(name: str, n: int, broker: RunningBroker | None, work: Callable[[], None]) -> Result:
    me = os.getpid()
    cpu0 = tree_cpu_seconds(me)
    b0 = broker.cpu_seconds() if broker else 0.0
    t0 = time.perf_counter()
    work()
    seconds = time.perf_counter() - t0
    spark_cpu = tree_cpu_seconds(me) - cpu0
    return Result(name, n, seconds, spark_cpu,
                  broker.cpu_seconds() - b0 if broker else None)


IN_BATCH: dict[str, float] = {}


def run_available_now(df: Any, checkpoint: Path) -> None:
    """Run to completion; remember the rate inside micro-batches (rows / trigger time),
    which leaves out the query's start and stop (about 1.5 s: Spark starts a Python
    planner process per query)."""
    query = df.writeStream.format("noop").option("checkpointLocation", str(checkpoint)) \
        .trigger(availableNow=True).start()
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    ms = sum(p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress)
    IN_BATCH[str(checkpoint)] = rows / (ms / 1000) if ms else 0.0


def write_parquet(spark: Any, broker: RunningBroker, topic: str, path: Path) -> None:
    """The same rows as the topic, as Parquet files (one per partition)."""
    df = spark.read.format("strom").option("kafka.bootstrap.servers", broker.bootstrap) \
        .option("subscribe", topic).load()
    df.write.mode("overwrite").parquet(str(path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--word-count-lines", type=int, default=200_000)
    parser.add_argument("--phases", default="ingest,writer,wordcount",
                        help="comma-separated subset of ingest,writer,eoswriter,wordcount")
    parser.add_argument("--out")
    args = parser.parse_args()
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("strom-bench")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    broker = start_strom()
    work = Path(tempfile.mkdtemp(prefix="strom-spark-bench-"))
    results: list[Result] = []
    phases = set(args.phases.split(","))
    try:
        topic, n = "ingest", args.records
        if "ingest" in phases:
            results.extend(ingest(spark, broker, work, topic, n, args.partitions))
        if "writer" in phases:
            results.append(writer(spark, broker, n, args.partitions))
        if "eoswriter" in phases:
            results.append(exactly_once_writer(spark, broker, n, args.partitions))
        if "wordcount" in phases:
            results.extend(word_count(spark, broker, work, args.word_count_lines))
    finally:
        broker.stop()
        spark.stop()
    table = ["| run | records | seconds | records/s | Spark CPU s per M | broker CPU s per M |",
             "|---|---:|---:|---:|---:|---:|", *(r.row() for r in results)]
    lines = list(table)
    if "ingest" in phases:
        ratio = results[0].rate / results[1].rate
        strom_in = IN_BATCH[str(work / "cp-strom")]
        parquet_in = IN_BATCH[str(work / "cp-parquet")]
        lines += ["", f"strom ingest / Parquet ingest records/s: {ratio:.2f}",
                  f"inside micro-batches (rows / trigger execution time): strom "
                  f"{strom_in:,.0f} records/s, Parquet {parquet_in:,.0f} records/s "
                  f"({strom_in / parquet_in:.2f})"]
    written = [r for r in results if r.name.startswith("batch writer")]
    if "ingest" in phases and written:
        write, read = written[0], results[0]
        lines.append(f"batch writer / strom ingest records/s: {write.rate / read.rate:.2f} "
                     f"(CPU per record: {write.spark_cpu / read.spark_cpu:.2f})")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


def ingest(spark: Any, broker: RunningBroker, work: Path, topic: str, n: int,
           partitions: int) -> list[Result]:
    """Streaming ingest of the topic and of the same rows as Parquet files, noop sink."""
    results: list[Result] = []
    produce(broker, topic, n, partitions)
    # The first pass over the data warms the JVM (JIT) and the Python workers; the second
    # pass, with a fresh checkpoint, is measured. Parquet gets the same treatment.
    stream = spark.readStream.format("strom").option(
        "kafka.bootstrap.servers", broker.bootstrap).option("subscribe", topic) \
        .option("startingOffsets", "earliest").load()
    run_available_now(stream, work / "cp-strom-warm")
    results.append(timed("ingest strom topic → noop", n, broker,
                         lambda: run_available_now(stream, work / "cp-strom")))

    parquet_dir = work / "parquet"
    write_parquet(spark, broker, topic, parquet_dir)
    schema = spark.read.parquet(str(parquet_dir)).schema
    files = spark.readStream.schema(schema).parquet(str(parquet_dir))
    run_available_now(spark.readStream.schema(schema).parquet(str(parquet_dir)),
                      work / "cp-parquet-warm")
    results.append(timed("ingest Parquet files → noop", n, None,
                         lambda: run_available_now(files, work / "cp-parquet")))
    return results


def writer(spark: Any, broker: RunningBroker, n: int, partitions: int) -> Result:
    """A cached DataFrame of ``n`` keyed 100-byte rows written with the batch writer.

    Like the ingest runs, a first write (into another topic) warms the JVM and the Python
    workers; the second is measured.
    """
    rows = spark.range(n).selectExpr(
        "CAST(id % 1000 AS STRING) AS key", f"repeat('x', {len(VALUE)}) AS value")
    rows = rows.repartition(partitions).cache()
    rows.count()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)
                                  for name in ("written-warm", "written")]).values():
        f.result(30)

    def write(topic: str) -> None:
        rows.write.format("strom").option("kafka.bootstrap.servers", broker.bootstrap) \
            .option("topic", topic).mode("append").save()

    write("written-warm")
    return timed("batch writer DataFrame → strom", n, broker, lambda: write("written"))


def exactly_once_writer(spark: Any, broker: RunningBroker, n: int, partitions: int) -> Result:
    """The batch writer's DataFrame written with ``exactlyOnce``: every task one transaction
    (init, rows, batch id as a group offset, commit). A first write warms up."""
    rows = spark.range(n).selectExpr(
        "CAST(id % 1000 AS STRING) AS key", f"repeat('x', {len(VALUE)}) AS value")
    rows = rows.repartition(partitions).cache()
    rows.count()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)
                                  for name in ("eos-warm", "eos-written")]).values():
        f.result(30)

    def write(topic: str) -> None:
        rows.write.format("strom").option("kafka.bootstrap.servers", broker.bootstrap) \
            .option("topic", topic).option("exactlyOnce", "true") \
            .option("writeId", f"bench-{topic}").mode("append").save()

    write("eos-warm")
    return timed("exactly-once writer DataFrame → strom", n, broker,
                 lambda: write("eos-written"))


def word_count(spark: Any, broker: RunningBroker, work: Path, lines: int) -> list[Result]:
    """End-to-end word count (strom.pipelines) over ``lines`` lines of 10 words."""
    from strom.pipelines import AVAILABLE_NOW, Endpoint, Source, word_count
    words = [f"w{i}" for i in range(500)]
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic("text", 2, 1)]).values():
        f.result(30)
    for i in range(lines):
        line = " ".join(words[(i * 7 + j * 13) % len(words)] for j in range(10))
        while True:
            try:
                producer.produce("text", line.encode())
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)

    def run() -> None:
        query = word_count(spark, Source(broker.bootstrap, ("text",)),
                           Endpoint(broker.bootstrap, "counts"), work / "cp-wc", AVAILABLE_NOW)
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))

    return [timed("word count text → counts (records = lines)", lines, broker, run)]


if __name__ == "__main__":
    main()
