"""What every pipeline is given: where records come from and go to, a checkpoint, a trigger.

- :class:`Source` — topics of a strom cluster read as a stream through ``format("strom")``
  (``subscribe`` or ``subscribePattern``; ``startingOffsets`` applies to the first start only,
  a restarted query continues from its checkpoint).
- :class:`Endpoint` — one topic of a strom cluster: an output topic, or a table to look up.
- :class:`Trigger` — ``available_now`` (process what is there, then stop) or a micro-batch
  every ``interval`` (a continuous run).
- The checkpoint is a directory (any path Spark accepts; ``sql_to_topic`` needs a local one).
  A pipeline started again with the same checkpoint continues where it stopped.

Helpers shared by the pipeline modules: reading a stream, writing a batch, starting a query,
creating a topic if it is missing, and waiting for a query while reporting its progress.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamWriter

from strom.client.sync import SyncAdminClient
from strom.common.errors import StromError, TopicAlreadyExistsError

FORMAT = "strom"
BOOTSTRAP_OPTION = "kafka.bootstrap.servers"


class PipelineError(StromError, ValueError):
    """A pipeline's settings are missing, contradictory or do not fit the data."""


@dataclass(frozen=True, slots=True)
class Source:
    """Topics read as a stream: exactly one of ``topics`` (``subscribe``) or ``pattern``
    (``subscribePattern``, matched against whole topic names).

    ``starting_offsets`` (``earliest``, ``latest`` or Spark's JSON) is used when a query
    starts without a checkpoint; the default here is ``earliest`` (Spark's is ``latest``), so
    a new pipeline processes what the topics already hold. ``options`` are passed to the
    ``strom`` source as they are (``failOnDataLoss``, ``kafka.*`` client settings, …).
    """

    bootstrap: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    options: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if isinstance(self.topics, str):  # Source(b, "events") reads like it should work
            object.__setattr__(self, "topics", (self.topics,))
        if bool(self.topics) == bool(self.pattern):
            raise PipelineError("a source needs either topics or a pattern (not both)")
        if not self.bootstrap:
            raise PipelineError("a source needs a bootstrap address")

    def reader_options(self, *, include_headers: bool = False) -> dict[str, str]:
        """The ``strom`` source's options for this source."""
        options = {BOOTSTRAP_OPTION: self.bootstrap, "startingOffsets": self.starting_offsets}
        if self.topics:
            options["subscribe"] = ",".join(self.topics)
        else:
            assert self.pattern is not None
            options["subscribePattern"] = self.pattern
        if self.max_offsets_per_trigger is not None:
            options["maxOffsetsPerTrigger"] = str(self.max_offsets_per_trigger)
        if include_headers:
            options["includeHeaders"] = "true"
        options.update(self.options)
        return options


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One topic of a strom cluster: where a pipeline writes, or a table it looks up.

    ``options`` go to the ``strom`` writer (or, for a table, the batch reader) unchanged.
    """

    bootstrap: str
    topic: str
    options: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not self.bootstrap or not self.topic:
            raise PipelineError("an endpoint needs a bootstrap address and a topic")

    def writer_options(self) -> dict[str, str]:
        """The ``strom`` sink's options: write every row to this topic."""
        return {BOOTSTRAP_OPTION: self.bootstrap, "topic": self.topic, **self.options}

    def reader_options(self) -> dict[str, str]:
        """The ``strom`` batch reader's options: the whole topic, earliest to latest."""
        return {BOOTSTRAP_OPTION: self.bootstrap, "subscribe": self.topic,
                "startingOffsets": "earliest", "endingOffsets": "latest", **self.options}


@dataclass(frozen=True, slots=True)
class Trigger:
    """When micro-batches run.

    ``available_now``: every record available at the start, in as many micro-batches as the
    read limits ask for, then the query stops by itself. Otherwise the query runs until
    stopped, starting a micro-batch every ``interval`` (Spark's processing-time trigger;
    ``"0 seconds"``: the next one as soon as the last one is done and new data is there).
    """

    available_now: bool = False
    interval: str = "0 seconds"

    def apply(self, writer: DataStreamWriter) -> DataStreamWriter:
        if self.available_now:
            return writer.trigger(availableNow=True)
        return writer.trigger(processingTime=self.interval)


AVAILABLE_NOW = Trigger(available_now=True)
CONTINUOUS = Trigger()


def read_stream(spark: SparkSession, source: Source, *,
                include_headers: bool = False) -> DataFrame:
    """The source's records as a streaming DataFrame in Spark's Kafka-source schema."""
    return spark.readStream.format(FORMAT) \
        .options(**source.reader_options(include_headers=include_headers)).load()


def write_batch(df: DataFrame, sink: Endpoint) -> None:
    """Write ``df`` (``key`` / ``value`` [/ ``partition`` / ``headers``]) to the sink's topic
    with the batch writer; returns when every record is acknowledged (at-least-once)."""
    df.write.format(FORMAT).mode("append").options(**sink.writer_options()).save()


def start(writer: DataStreamWriter, checkpoint: str | Path, trigger: Trigger) -> StreamingQuery:
    """Start ``writer`` with its checkpoint directory and trigger."""
    return trigger.apply(writer.option("checkpointLocation", str(checkpoint))).start()


def ensure_topic(bootstrap: str, topic: str, partitions: int = -1,
                 configs: Mapping[str, str] | None = None) -> bool:
    """Create ``topic`` unless it exists (``-1`` partitions: the broker's default).

    Returns whether it was created here. An existing topic is left as it is (its configs are
    not changed, so an existing counts topic without ``cleanup.policy=compact`` stays so).
    """
    with SyncAdminClient(bootstrap) as admin:
        if topic in admin.list_topics(include_internal=True):
            return False
        try:
            admin.create_topic(topic, partitions, -1, dict(configs or {}))
        except TopicAlreadyExistsError:
            return False  # created by someone else meanwhile
    return True


Progress = Mapping[str, Any]


def await_query(query: StreamingQuery, *, stop: threading.Event | None = None,
                on_progress: Callable[[Progress], None] | None = None,
                poll_s: int = 1) -> None:
    """Wait until ``query`` ends: by itself (AvailableNow), by failing (its exception is
    raised), or because ``stop`` was set — then it is stopped between two micro-batches, so
    a running micro-batch finishes first (``StreamingQuery.stop`` alone would cancel it, and
    it would be replayed on the next start). ``on_progress`` is called once for each
    micro-batch that ran, with Spark's progress dict (``batchId``, ``numInputRows``, …).

    Waiting in short steps keeps signal handlers from interrupting a call into the JVM.
    """
    seen = -1

    def report() -> None:
        nonlocal seen
        for progress in query.recentProgress:
            batch = int(progress["batchId"])
            # Idle triggers report progress too, under the id of the next batch to run.
            if batch > seen and "addBatch" in progress.get("durationMs", {}):
                seen = batch
                if on_progress is not None:
                    on_progress(progress)

    while query.isActive:
        if stop is not None and stop.is_set():
            if not query.status["isTriggerActive"]:
                query.stop()
                break
            time.sleep(0.02)  # look often: with a busy query the gaps are short
            continue
        query.awaitTermination(poll_s)  # raises the query's exception if it failed
        report()
    report()
    failure = query.exception()
    if failure is not None:
        raise failure
