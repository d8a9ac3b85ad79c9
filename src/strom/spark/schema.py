"""The row layout of the ``strom`` source, identical to Spark's Kafka source.

``SCHEMA_DDL`` is what :meth:`StromDataSource.schema` returns; :func:`arrow_schema` is the
matching Arrow schema that ``read()`` must produce exactly (Spark checks field types and
nullability): timestamps are microseconds with the session's UTC adjustment done by Spark.
"""

from __future__ import annotations

import pyarrow as pa

BASE_DDL = ("key binary, value binary, topic string, partition int, offset long, "
            "timestamp timestamp, timestampType int")
HEADERS_DDL = "headers array<struct<key:string,value:binary>>"

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])


def schema_ddl(include_headers: bool) -> str:
    """The DDL schema string, with the ``headers`` column when ``include_headers``."""
    return f"{BASE_DDL}, {HEADERS_DDL}" if include_headers else BASE_DDL


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema of the record batches ``read()`` yields."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(HEADER_TYPE)))
    return pa.schema(fields)
