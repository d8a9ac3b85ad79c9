"""PySpark looks up top-level ``pyspark_<name>`` modules and registers their ``DefaultSource``.

This makes ``spark.read.format("strom")`` work without ``spark.dataSource.register(...)``.
"""

from strom.spark.source import StromDataSource as DefaultSource

__all__ = ["DefaultSource"]
