"""A strom → strom streaming query with the exactlyOnce sink (run as a subprocess, killed
with its process group by tests/spark/test_exactly_once_crash.py).

    python tests/spark/eos_job.py BOOTSTRAP SOURCE SINK CHECKPOINT STARTED [final]

Copies SOURCE's key and value to SINK in micro-batches of at most 40 records, triggered
every 100 ms, from the checkpoint. Creates STARTED once the query runs. With ``final`` it
processes what is there (availableNow) and exits 0: it first replays the batch the last kill
interrupted (Spark plans a replay from its offset log, whatever the limit), then drains the
rest in one batch (many 40-record batches there would prove nothing the killed runs do not).
"""

from __future__ import annotations

import sys
from pathlib import Path

from pyspark.sql import SparkSession


def main() -> None:
    bootstrap, source, sink, checkpoint, started = sys.argv[1:6]
    final = sys.argv[6:] == ["final"]
    spark = (SparkSession.builder.master("local[2]").appName("strom-eos-job")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    reader = (spark.readStream.format("strom").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest"))
    if not final:
        reader = reader.option("maxOffsetsPerTrigger", "40")
    writer = (reader.load().select("key", "value").writeStream.format("strom")
              .option("kafka.bootstrap.servers", bootstrap).option("topic", sink)
              .option("exactlyOnce", "true").option("checkpointLocation", checkpoint))
    if final:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="100 milliseconds")
    query = writer.start()
    Path(started).write_text(query.id + "\n")
    query.awaitTermination()
    if query.exception() is not None:
        raise SystemExit(f"query failed: {query.exception()}")


if __name__ == "__main__":
    main()
