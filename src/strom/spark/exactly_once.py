"""The ``exactlyOnce`` writers: one Kafka transaction per Spark task, its batch id inside it.

Each write task (one Spark partition of one micro-batch, or of one batch write) runs::

    transactional.id = "<transactionalIdPrefix>-<query id | writeId>-<task partition id>"
    init_transactions()            # fences every older holder of the id (a zombie attempt,
                                   # the task before a crash) and ends what it left open
    last = committed offset of group <transactional.id> on (<first row's topic>, 0)
    if last >= batch id: return    # a replay of a batch this task already committed
    begin_transaction(); send every row
    send_offsets_to_transaction({(<topic>, 0): batch id}, group <transactional.id>)
    commit_transaction()           # rows and batch id become visible together, or neither

The batch id is stored as the committed offset of a group named like the transactional id
(an offset commit must name an existing topic-partition; partition 0 of the task's first
topic always exists), with ``strom-spark exactly-once batch <n>`` as its metadata. Because
it commits atomically with the rows, "the rows of batch n, task p are visible" and "group
p's offset is ≥ n" are the same fact, so a task run again after any crash either finds its
batch committed and writes nothing, or finds it absent (an open transaction of the previous
attempt was aborted by ``init_transactions``) and writes it whole.

A streaming task learns its query id (persisted in the checkpoint) and micro-batch id from
Spark's task-local properties ``sql.streaming.queryId`` / ``streaming.sql.batchId``; a batch
write gives ``writeId`` and ``batchId`` as options. The driver has nothing to commit: the
tasks' transactions are committed when Spark records the micro-batch as done.

Limits (also in the package README): a replayed batch must give every task the same rows as
the first run (true for a strom source read from the offsets in the checkpoint and a
deterministic plan); a micro-batch becomes visible task by task, not all at once; rows of one
source partition split over several tasks (``minPartitions``) lose their relative order, as
in Spark's Kafka sink; a task must finish within ``kafka.transaction.timeout.ms`` (default
60 s) or the coordinator aborts it and the task fails; each task leaves a consumer group
named by its transactional id.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import WriterCommitMessage

from strom.client.admin_types import OffsetAndMetadata
from strom.client.sync import SyncProducer
from strom.common.errors import KafkaError, error_class
from strom.common.types import TopicPartition
from strom.spark.clients import committed_offset
from strom.spark.options import ExactlyOnceOptions, SinkOptions, StromSourceOptionError
from strom.spark.writer import (
    StromArrowWriter,
    StromCommitMessage,
    StromStreamArrowWriter,
    send_batches,
)

log = logging.getLogger(__name__)

#: Task-local properties Spark's micro-batch execution sets for every task it runs.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
METADATA_PREFIX = "strom-spark exactly-once batch "
_UNSTABLE = error_class("UNSTABLE_OFFSET_COMMIT").code
_STABLE_WAIT_S = 30.0


@dataclass
class ExactlyOnceCommitMessage(StromCommitMessage):
    """What one task did: ``records`` committed in its transaction, or ``replayed`` (its
    batch was committed before, nothing written)."""

    replayed: bool = False


@dataclass(frozen=True, slots=True)
class TaskTransaction:
    """Who a task writes as: its transactional id (also its marker group) and batch id."""

    transactional_id: str
    batch_id: int


def task_transaction(eos: ExactlyOnceOptions, context: TaskContext) -> TaskTransaction:
    """The running task's :class:`TaskTransaction` (the same for every attempt of a task)."""
    if eos.write_id is not None:
        write_id, batch_id = eos.write_id, eos.batch_id
    else:
        query = context.getLocalProperty(QUERY_ID_PROPERTY)
        batch = context.getLocalProperty(BATCH_ID_PROPERTY)
        if query is None or batch is None:
            raise StromSourceOptionError(
                "the exactlyOnce stream writer runs outside a micro-batch (no streaming "
                "query id / batch id in the task's properties)")
        write_id, batch_id = query, int(batch)
    return TaskTransaction(f"{eos.transactional_id_prefix}-{write_id}-{context.partitionId()}",
                           batch_id)


def _current_task(options: SinkOptions) -> TaskTransaction:
    context = TaskContext.get()
    if options.exactly_once is None or context is None:
        raise StromSourceOptionError("the exactlyOnce writer runs only in a Spark task")
    return task_transaction(options.exactly_once, context)


def write_exactly_once(options: SinkOptions, task: TaskTransaction,
                       iterator: Iterator[pa.RecordBatch]) -> ExactlyOnceCommitMessage:
    """Run one task's transaction (see the module doc). A task without rows opens none."""
    rows = (batch for batch in iterator if batch.num_rows)
    first = next(rows, None)
    if first is None:
        return ExactlyOnceCommitMessage(0)
    marker = TopicPartition(options.topic or _first_topic(first), 0)
    client = options.client
    producer = SyncProducer(options.bootstrap, transactional_id=task.transactional_id,
                            transaction_timeout_ms=client.transaction_timeout_ms,
                            **client.producer_kwargs())
    try:
        producer.init_transactions()
        last = _last_batch(options.bootstrap, task.transactional_id, marker)
        if last is not None and last >= task.batch_id:
            log.info("%s: batch %d already committed (last %d); writing nothing",
                     task.transactional_id, task.batch_id, last)
            return ExactlyOnceCommitMessage(0, replayed=True)
        producer.begin_transaction()
        try:
            written = send_batches(producer, options, itertools.chain([first], rows))
            producer.send_offsets_to_transaction(
                {marker: OffsetAndMetadata(task.batch_id, f"{METADATA_PREFIX}{task.batch_id}")},
                task.transactional_id)
            producer.commit_transaction()
        except BaseException:
            _abort_quietly(producer)
            raise
        return ExactlyOnceCommitMessage(written)
    finally:
        _close_quietly(producer)


def _first_topic(batch: pa.RecordBatch) -> str:
    topic = batch.column("topic")[0].as_py()
    if topic is None:
        raise StromSourceOptionError("a row to write has a null topic")
    return str(topic)


def _last_batch(bootstrap: str, group_id: str, marker: TopicPartition) -> int | None:
    """The batch id the task's group committed last (None: none). Retries
    UNSTABLE_OFFSET_COMMIT, which only a transaction still completing can cause."""
    deadline = time.monotonic() + _STABLE_WAIT_S
    while True:
        try:
            found = committed_offset(bootstrap, group_id, marker)
        except KafkaError as exc:
            if exc.code != _UNSTABLE or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
            continue
        return None if found is None else found.offset


def _abort_quietly(producer: SyncProducer) -> None:
    """Abort so read_committed readers need not wait for the transaction timeout; a fenced or
    failed producer cannot, and then the coordinator (timeout or the next init) aborts."""
    try:
        producer.abort_transaction()
    except Exception as exc:  # the task's own error is the one to report
        log.warning("aborting %s failed: %s", producer.producer.transactional_id, exc)


def _close_quietly(producer: SyncProducer) -> None:
    """Close; a failure here (a fenced producer cannot flush) must not hide the task's own
    outcome: a committed transaction stays committed, a failed one was reported already."""
    try:
        producer.close()
    except Exception as exc:
        log.warning("closing %s failed: %s", producer.producer.transactional_id, exc)


class ExactlyOnceArrowWriter(StromArrowWriter):
    """Batch write with ``exactlyOnce``: each task one transaction named by ``writeId`` and
    its partition, recorded under ``batchId`` (a rerun of the same batch id writes nothing
    that was committed)."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ExactlyOnceCommitMessage:
        return write_exactly_once(self.options, _current_task(self.options), iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every task committed its own transaction; nothing more to do."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Tasks that committed stay visible; running the write again with the same
        ``writeId`` and ``batchId`` writes the rest exactly once."""


class ExactlyOnceStreamArrowWriter(StromStreamArrowWriter):
    """Streaming sink with ``exactlyOnce``: each task of micro-batch n one transaction named by
    the query id and its partition, recorded under n (a replay of n after a restart writes
    only what was not committed)."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ExactlyOnceCommitMessage:
        return write_exactly_once(self.options, _current_task(self.options), iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        replayed = sum(1 for m in messages
                       if isinstance(m, ExactlyOnceCommitMessage) and m.replayed)
        if replayed:
            log.info("micro-batch %d: %d task(s) had committed before a restart", batchId,
                     replayed)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Committed tasks stay visible; Spark replays the micro-batch and they write nothing."""
