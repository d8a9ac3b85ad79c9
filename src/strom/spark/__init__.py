"""strom's Spark data source (``format("strom")``): Spark's Kafka schema and options.

The data source needs PySpark 4, pyarrow and numpy (``pip install 'strom[spark]'``). The
format is registered automatically through the top-level ``pyspark_strom`` module, in the
Python that Spark runs for its workers; :func:`check_worker_python` tells, from the driver,
whether that Python can load it. Attributes are imported on first use, so importing this
package (and :mod:`strom.spark.worker_python`) works where those dependencies are missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.spark.worker_python import StromSparkSetupError, check_worker_python

if TYPE_CHECKING:
    from strom.spark.options import StromSourceOptionError
    from strom.spark.source import StromDataSource

__all__ = ["StromDataSource", "StromSourceOptionError", "StromSparkSetupError",
           "check_worker_python"]


def __getattr__(name: str) -> Any:
    if name == "StromDataSource":
        from strom.spark.source import StromDataSource
        return StromDataSource
    if name == "StromSourceOptionError":
        from strom.spark.options import StromSourceOptionError
        return StromSourceOptionError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
