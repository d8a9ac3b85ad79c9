"""Stream-processing pipelines on Spark Structured Streaming and the ``strom`` data source.

Each pipeline takes a SparkSession and its settings and returns the started
``StreamingQuery`` (``sql_to_topic`` runs and returns what it did); see each module for the
records it reads and writes and its restart and delivery guarantees. Needs ``pyspark``
(``pip install 'strom[spark]'``).
"""

from __future__ import annotations

from strom.pipelines.common import (
    AVAILABLE_NOW,
    CONTINUOUS,
    Endpoint,
    PipelineError,
    Source,
    Trigger,
    await_query,
)
from strom.pipelines.files import files_to_topic
from strom.pipelines.join import stream_table_join
from strom.pipelines.mirror import MirrorTarget, mirror
from strom.pipelines.parquet import topic_to_parquet
from strom.pipelines.sql import SqlProgress, SqlSource, sql_to_topic
from strom.pipelines.windowed import windowed_word_count
from strom.pipelines.word_count import word_count

__all__ = [
    "AVAILABLE_NOW",
    "CONTINUOUS",
    "Endpoint",
    "MirrorTarget",
    "PipelineError",
    "Source",
    "SqlProgress",
    "SqlSource",
    "Trigger",
    "await_query",
    "files_to_topic",
    "mirror",
    "sql_to_topic",
    "stream_table_join",
    "topic_to_parquet",
    "windowed_word_count",
    "word_count",
]
