"""strom's Spark data source (``format("strom")``): Spark's Kafka schema and options.

Importing this package needs PySpark 4 and pyarrow (``pip install 'strom[spark]'``). The
format is registered automatically through the top-level ``pyspark_strom`` module.
"""

from strom.spark.options import StromSourceOptionError
from strom.spark.source import StromDataSource

__all__ = ["StromDataSource", "StromSourceOptionError"]
