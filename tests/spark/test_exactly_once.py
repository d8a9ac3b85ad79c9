"""The exactlyOnce sink on real PySpark (local[2]) against an embedded strom broker: batch
writes recognised when run again, a replayed micro-batch not duplicated, zombies fenced."""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

from strom.client.sync import SyncAdminClient, SyncProducer
from strom.client.txn_errors import FencedProducerError, TransactionError
from strom.common.types import TopicPartition
from strom.testing import EmbeddedBroker
from tests.client.txn_helpers import BROKER_DROPS_ABORTED
from tests.spark.eos_helpers import new_topic, produce_keyed, read_committed, values


def _write(df: Any, broker: EmbeddedBroker, topic: str, write_id: str, batch_id: int) -> None:
    (df.write.format("strom").option("kafka.bootstrap.servers", broker.bootstrap)
     .option("topic", topic).option("exactlyOnce", "true").option("writeId", write_id)
     .option("batchId", str(batch_id)).mode("append").save())


def test_batch_write_is_recognised_when_run_again(spark: Any, broker: EmbeddedBroker) -> None:
    topic = new_topic(broker.bootstrap)
    rows = [(f"k{i % 7}", f"v{i}") for i in range(300)]
    df = spark.createDataFrame(rows, "key string, value string").repartition(3)
    write_id = f"w-{uuid.uuid4().hex[:8]}"

    _write(df, broker, topic, write_id, 0)
    expected = sorted(v for _, v in rows)
    assert values(read_committed(broker.bootstrap, topic)) == expected
    _write(df, broker, topic, write_id, 0)  # the same batch again: every task finds it
    assert values(read_committed(broker.bootstrap, topic)) == expected
    _write(df, broker, topic, write_id, 1)  # a new batch id is new output
    assert values(read_committed(broker.bootstrap, topic)) == sorted(expected * 2)

    # Each task recorded the batch id in its own group, inside its transaction.
    with SyncAdminClient(broker.bootstrap) as admin:
        for task in range(3):
            committed = admin.list_consumer_group_offsets(f"strom-spark-{write_id}-{task}")
            assert committed[TopicPartition(topic, 0)].offset == 1


def test_a_zombie_holding_the_tasks_transactional_id_is_fenced(
        spark: Any, broker: EmbeddedBroker) -> None:
    topic = new_topic(broker.bootstrap)
    write_id = f"z-{uuid.uuid4().hex[:8]}"
    zombie = SyncProducer(broker.bootstrap, transactional_id=f"strom-spark-{write_id}-0")
    try:
        zombie.init_transactions(30)
        zombie.begin_transaction()
        zombie.send(topic, b"zombie", partition=0).result(30)  # in the log, not committed
        df = spark.createDataFrame([(f"v{i}",) for i in range(50)], "value string").coalesce(1)
        _write(df, broker, topic, write_id, 0)  # the task's init_transactions fences it
        with pytest.raises(FencedProducerError):
            zombie.commit_transaction(30)
    finally:
        with contextlib.suppress(TransactionError):
            zombie.close()
    seen = values(read_committed(broker.bootstrap, topic))
    if BROKER_DROPS_ABORTED:
        assert seen == sorted(f"v{i}" for i in range(50))
    else:  # the aborted record stays visible until the broker returns aborted transactions
        assert sorted(set(seen) - {"zombie"}) == sorted(f"v{i}" for i in range(50))


def test_a_replayed_micro_batch_is_not_written_again(
        spark: Any, broker: EmbeddedBroker, tmp_path: Path) -> None:
    source, sink = new_topic(broker.bootstrap), new_topic(broker.bootstrap)
    sent = produce_keyed(broker.bootstrap, source, 60, keys=6)
    checkpoint = tmp_path / "cp"

    def run() -> Any:
        query = (spark.readStream.format("strom")
                 .option("kafka.bootstrap.servers", broker.bootstrap).option("subscribe", source)
                 .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "20")
                 .load().select("key", "value").writeStream.format("strom")
                 .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", sink)
                 .option("exactlyOnce", "true").option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None
        return query

    first = run()
    assert [p["batchId"] for p in first.recentProgress if p["numInputRows"]] == [0, 1, 2]
    expected = sorted(v for _, v in sent)
    assert values(read_committed(broker.bootstrap, sink)) == expected
    # As if the driver died after the sink committed batch 2 but before Spark logged it.
    (checkpoint / "commits" / "2").unlink()
    (checkpoint / "commits" / ".2.crc").unlink(missing_ok=True)
    again = run()
    replayed = [p for p in again.recentProgress if p["numInputRows"]]
    assert [(p["batchId"], p["numInputRows"]) for p in replayed] == [(2, 20)]
    assert values(read_committed(broker.bootstrap, sink)) == expected
