"""Session fixtures shared by test packages: one SparkSession (local[2]) and one embedded
broker for the whole run, each started only when a test first asks for it."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from strom.testing import EmbeddedBroker


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pyspark_sql = pytest.importorskip("pyspark.sql", reason="pyspark is not installed "
                                      "(pip install -e '.[spark]')")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        pyspark_sql.SparkSession.builder.master("local[2]")
        .appName("strom-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    # Many tests write records with fixed timestamps from past years (Spark, pipelines): the
    # shared broker's time retention, every 5 minutes by default, would delete them at a
    # random moment between a test's write and its check. Retention is tested on brokers of
    # its own.
    with EmbeddedBroker(config={"log.retention.check.interval.ms": 86_400_000}) as embedded:
        yield embedded
