"""``StromDataSource``: the ``strom`` format, a drop-in for Spark's ``kafka`` format.

    spark.read.format("strom")
        .option("kafka.bootstrap.servers", "127.0.0.1:9092")
        .option("subscribe", "events")
        .load()

Options are parsed (and rejected with :class:`~strom.spark.options.StromSourceOptionError`)
when Spark asks for a reader or writer; the reader and writer carry only parsed options, so
they pickle cheaply to the executors.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from strom.spark.batch import StromBatchReader
from strom.spark.exactly_once import ExactlyOnceArrowWriter, ExactlyOnceStreamArrowWriter
from strom.spark.options import SUBSCRIBE_OPTIONS, parse_sink_options, parse_source_options
from strom.spark.schema import schema_ddl
from strom.spark.stream import StromStreamReader
from strom.spark.writer import StromArrowWriter, StromStreamArrowWriter, check_sink_schema


class StromDataSource(DataSource):
    """Spark's Kafka source and sink schema and options, on strom's Python client."""

    @classmethod
    def name(cls) -> str:
        return "strom"

    def schema(self) -> str:
        """The rows' schema. Spark asks for it when a read is defined (``load()``), so a read's
        options are checked here too: a bad option fails at ``load()`` with strom's message
        (later, PySpark's streaming planner would bury it in its own traceback). Writes give
        no subscribe option and are checked in :meth:`writer`."""
        options = dict(self.options)
        if any(name.lower() in (k.lower() for k in options) for name in SUBSCRIBE_OPTIONS):
            return schema_ddl(parse_source_options(options, streaming=False).include_headers)
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return schema_ddl(include)

    def reader(self, schema: StructType) -> DataSourceReader:
        return StromBatchReader(parse_source_options(dict(self.options), streaming=False))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options = parse_sink_options(dict(self.options))
        check_sink_schema(schema, options)
        if options.exactly_once is not None:
            return ExactlyOnceArrowWriter(options)
        return StromArrowWriter(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StromStreamReader(parse_source_options(dict(self.options), streaming=True))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = parse_sink_options(dict(self.options), streaming=True)
        check_sink_schema(schema, options)
        if options.exactly_once is not None:
            return ExactlyOnceStreamArrowWriter(options)
        return StromStreamArrowWriter(options)
