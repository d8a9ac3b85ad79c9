"""A streaming job that stops dead in the middle of a micro-batch (run as a subprocess).

    python tests/spark/crashing_job.py BOOTSTRAP TOPIC CHECKPOINT OUT MARKER CRASH_BATCH

Reads TOPIC with ``maxOffsetsPerTrigger=20`` and appends ``batch partition offset`` lines to
OUT (fsynced). In micro-batch CRASH_BATCH it writes half of the rows, creates MARKER and
hangs, so the test can ``kill -9`` the driver mid-batch.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from pyspark.sql import SparkSession


def main() -> None:
    bootstrap, topic, checkpoint, out, marker, crash_batch = sys.argv[1:7]
    spark = (SparkSession.builder.master("local[2]").appName("strom-crashing-job")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")

    def sink(df: Any, batch_id: int) -> None:
        rows = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
        if batch_id == int(crash_batch):
            rows = rows[: len(rows) // 2]
        with open(out, "a") as f:
            f.writelines(f"{batch_id} {p} {o}\n" for p, o in rows)
            f.flush()
            os.fsync(f.fileno())
        if batch_id == int(crash_batch):
            with open(marker, "w") as f:
                f.write("mid-batch\n")
            time.sleep(600)

    query = (spark.readStream.format("strom").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "20").load()
             .writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()


if __name__ == "__main__":
    main()
