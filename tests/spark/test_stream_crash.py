"""Kill -9 a streaming driver in the middle of a micro-batch, restart, check the replay."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

from strom.client.sync import SyncAdminClient, SyncProducer
from strom.testing import EmbeddedBroker

JOB = Path(__file__).with_name("crashing_job.py")
RECORDS = 100
CRASH_BATCH = 2


def test_killed_mid_batch_replays_the_same_offsets(
        spark: Any, broker: EmbeddedBroker, tmp_path: Path) -> None:
    topic = f"crash-{uuid.uuid4().hex[:8]}"
    with SyncAdminClient(broker.bootstrap) as admin:
        admin.create_topic(topic, 2, 1)
    with SyncProducer(broker.bootstrap) as producer:
        for i in range(RECORDS):
            producer.send(topic, f"v{i}".encode(), partition=i % 2)
        producer.flush()
    checkpoint, out, marker = tmp_path / "cp", tmp_path / "out.txt", tmp_path / "marker"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    job = subprocess.Popen(
        [sys.executable, str(JOB), broker.bootstrap, topic, str(checkpoint), str(out),
         str(marker), str(CRASH_BATCH)],
        env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while not marker.exists():
            assert job.poll() is None, "the job ended before reaching the crash point"
            assert time.monotonic() < deadline, "the job never reached the crash point"
            time.sleep(0.2)
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # the driver and its JVM, mid-batch
        job.wait()

    first: dict[int, set[tuple[int, int]]] = {}
    for line in out.read_text().splitlines():
        batch, p, o = map(int, line.split())
        first.setdefault(batch, set()).add((p, o))
    assert sorted(first) == list(range(CRASH_BATCH + 1))

    replayed: dict[int, set[tuple[int, int]]] = {}

    def sink(df: Any, batch_id: int) -> None:
        replayed[batch_id] = {(r.partition, r.offset)
                              for r in df.select("partition", "offset").collect()}

    query = (spark.readStream.format("strom").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "20").load()
             .writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    # The interrupted batch runs again first, with exactly the offsets it was planned with.
    assert min(replayed) == CRASH_BATCH
    assert first[CRASH_BATCH] < replayed[CRASH_BATCH]
    assert len(replayed[CRASH_BATCH]) == 20
    # Completed batches are not read again; together every record arrives exactly once.
    everything = [po for b in sorted(first) if b < CRASH_BATCH for po in first[b]]
    everything += [po for b in sorted(replayed) for po in replayed[b]]
    assert sorted(everything) == sorted((i % 2, i // 2) for i in range(RECORDS))
