"""``strom pipeline``: one run as a real subprocess (its own JVM), the rest in-process on the
test session (the command reuses an active SparkSession and leaves it running)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from strom.cli.main import main
from strom.cli.pipeline import duration_ms, spark_error
from strom.testing import EmbeddedBroker
from tests.pipelines.helpers import (
    latest_by_key,
    name,
    new_topic,
    produce_values,
    read_topic,
    text,
    words,
)

LINES = ["to be or not to be", "that is the question", "To be, or NOT?", "be"]


def test_word_count_command_in_its_own_process(broker: EmbeddedBroker, tmp_path: Path) -> None:
    pytest.importorskip("pyspark", reason="pyspark is not installed")
    lines, counts = new_topic(broker.bootstrap, "cli-lines"), name("cli-counts")
    produce_values(broker.bootstrap, lines, LINES)
    command = [sys.executable, "-m", "strom", "pipeline", "word-count",
               "--bootstrap", broker.bootstrap, "--input", lines, "--output", counts,
               "--checkpoint", str(tmp_path / "cp"), "--available-now", "--master", "local[1]",
               "--shuffle-partitions", "1", "--conf", "spark.ui.enabled=false"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=240,
                            env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert result.returncode == 0, result.stderr
    assert "batch 0: 4 input rows" in result.stderr
    assert "done: 1 batches, 4 input rows" in result.stderr
    assert "Traceback" not in result.stderr
    expected = Counter(w for line in LINES for w in words(line))
    assert latest_by_key(read_topic(broker.bootstrap, counts)) == \
        {w: str(c) for w, c in expected.items()}


def test_a_worker_python_that_cannot_load_strom_is_one_clear_line(tmp_path: Path) -> None:
    """Checked from the driver before the query starts (Spark itself would report only
    DATA_SOURCE_NOT_FOUND: strom when the worker Python lacks strom)."""
    pytest.importorskip("pyspark", reason="pyspark is not installed")
    command = [sys.executable, "-m", "strom", "pipeline", "word-count", "--input", "a",
               "--output", "b", "--checkpoint", str(tmp_path / "cp"), "--available-now",
               "--master", "local[1]", "--conf", "spark.ui.enabled=false",
               "--conf", "spark.pyspark.python=/nowhere/python"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    [line] = [ln for ln in result.stderr.splitlines() if ln.startswith("strom pipeline:")]
    assert line.startswith("strom pipeline: error: Spark cannot start its Python workers: "
                           "'/nowhere/python' is not an executable "
                           "(spark.pyspark.python=/nowhere/python)")
    assert line.endswith(f"set spark.pyspark.python to a Python where strom is installed "
                         f"with its Spark extras (this driver runs one: "
                         f"spark.pyspark.python={sys.executable})")


def test_sigterm_stops_a_continuous_run_cleanly(
        spark: Any, broker: EmbeddedBroker, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    lines, counts = new_topic(broker.bootstrap, "sig-lines"), name("sig-counts")
    produce_values(broker.bootstrap, lines, LINES)

    def terminate_after_first_counts() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if read_topic(broker.bootstrap, counts):
                    break
            except Exception:  # the counts topic may not exist yet
                pass
            time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGTERM)

    killer = threading.Thread(target=terminate_after_first_counts, daemon=True)
    killer.start()
    code = main(["pipeline", "word-count", "--bootstrap", broker.bootstrap, "--input", lines,
                 "--output", counts, "--checkpoint", str(tmp_path / "cp"), "--interval", "1s",
                 "--shuffle-partitions", "2"])
    killer.join(5)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "batch 0: 4 input rows" in err
    assert "stopped: 1 batches, 4 input rows" in err
    assert spark.range(3).count() == 3  # the test session was left running
    assert len(read_topic(broker.bootstrap, counts)) == len(set(w for ln in LINES
                                                                for w in words(ln)))


def test_sql_to_topic_command(spark: Any, broker: EmbeddedBroker, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "people.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT)")
        conn.executemany("INSERT INTO people VALUES (?, ?)", [(1, "ann"), (2, "bo"), (3, "cy")])
    topic = new_topic(broker.bootstrap, "people", 1)
    code = main(["pipeline", "sql-to-topic", "--bootstrap", broker.bootstrap,
                 "--database", str(db), "--table", "people", "--incrementing-column", "id",
                 "--key-column", "name", "--batch-size", "2", "--output", topic,
                 "--checkpoint", str(tmp_path / "cp"), "--available-now",
                 "--shuffle-partitions", "2"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "batch 2: 3 rows so far, last id = 3" in err
    assert [(text(r.key), json.loads(text(r.value) or "")) for r in
            read_topic(broker.bootstrap, topic)] == \
        [("ann", {"id": 1, "name": "ann"}), ("bo", {"id": 2, "name": "bo"}),
         ("cy", {"id": 3, "name": "cy"})]


def test_without_pyspark_the_command_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)
    code = main(["pipeline", "word-count", "--input", "a", "--output", "b",
                 "--checkpoint", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip().splitlines() == [
        "strom pipeline: error: strom pipeline needs PySpark (pyspark is not installed): "
        "pip install 'strom[spark]'"]


def test_durations() -> None:
    assert [duration_ms(d) for d in ("10s", "5 minutes", "500ms", "2h", "1 day")] == \
        [10_000, 300_000, 500, 7_200_000, 86_400_000]
    for bad in ("", "ten seconds", "5 fortnights", "-1s"):
        with pytest.raises(Exception, match="duration"):
            duration_ms(bad)


def test_spark_errors_become_one_line() -> None:
    worker = RuntimeError(
        "[PYTHON_DATA_SOURCE_ERROR] Failed to plan: Traceback (most recent call last):\n"
        '  File "x.py", line 3, in f\n    raise StromSourceOptionError(\n'
        "strom.spark.options.StromSourceOptionError: startingOffsets must be 'earliest'\n"
        "\nDuring handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\nUnboundLocalError: cannot access 'reader'\n"
        " SQLSTATE: 38000")
    assert spark_error(worker) == "StromSourceOptionError: startingOffsets must be 'earliest'"
    stream = RuntimeError("[STREAM_FAILED] Query [id = 1, runId = 2] terminated with "
                          "exception: requirement failed: no SQLSTATE: XXKST\n=== Query ===")
    assert spark_error(stream) == "requirement failed: no"
