"""PySpark looks up top-level ``pyspark_<name>`` modules and registers their ``DefaultSource``.

This makes ``spark.read.format("strom")`` work without ``spark.dataSource.register(...)``.

Spark imports this module in the Python it starts for its workers (``spark.pyspark.python``,
else ``$PYSPARK_PYTHON``, else ``python3`` from PATH), which need not be the Python that runs
the driver. If the data source's dependencies (pyarrow, numpy) do not import there, raising
here would make Spark skip every Python data source and report only
``DATA_SOURCE_NOT_FOUND: strom``. Instead the format is registered as a stand-in that fails
on first use with :data:`LOAD_ERROR`: which Python, which module is missing, how to fix it.
``strom.spark.worker_python`` imports only the standard library, so the stand-in can load.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource

from strom.spark.worker_python import StromSparkSetupError, load_error

__all__ = ["LOAD_ERROR", "DefaultSource"]

LOAD_ERROR: str | None
try:
    from strom.spark.source import StromDataSource as DefaultSource
except ImportError as _exc:
    LOAD_ERROR = load_error(_exc)

    class DefaultSource(DataSource):  # type: ignore[no-redef]
        """Stands in for the ``strom`` format when it cannot load: every use fails with
        :data:`LOAD_ERROR` instead of Spark's bare DATA_SOURCE_NOT_FOUND."""

        @classmethod
        def name(cls) -> str:
            return "strom"

        def __init__(self, options: dict[str, Any]) -> None:
            raise StromSparkSetupError(LOAD_ERROR)
else:
    LOAD_ERROR = None
