"""Words of text records, shared by the word-count pipelines.

A record's value is read as UTF-8 text, lower-cased and split at runs of non-word characters
(``(?U)\\W+``: Unicode-aware, so ``café`` is one word, like Python's ``re.split(r"\\W+")``);
empty pieces are dropped. Null values (tombstones) contribute no words.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

SPLIT_PATTERN = r"(?U)\W+"


def words(value: Column) -> Column:
    """An array of the lower-cased words of ``value`` (binary or string)."""
    return F.split(F.lower(value.cast("string")), SPLIT_PATTERN)


def explode_words(records: DataFrame, *keep: str) -> DataFrame:
    """One row per word of each record (column ``word``), with the columns ``keep``."""
    exploded = records.select(*keep, F.explode(words(F.col("value"))).alias("word"))
    return exploded.where(F.col("word") != "")
