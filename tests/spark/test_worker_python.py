"""When Spark's worker Python cannot load the data source, the user is told which Python,
what is missing and how to fix it — never only Spark's ``DATA_SOURCE_NOT_FOUND: strom``.

Spark picks the worker Python itself (``spark.pyspark.python``, ``$PYSPARK_PYTHON``, else
``python3`` from PATH). The tests give it real interpreters: this virtualenv's Python with
numpy made unimportable (a package earlier on the path that raises ModuleNotFoundError, as
an uninstalled numpy does), and the virtualenv's base interpreter run directly (a virtualenv
that is not activated: strom is not installed there).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

from strom.spark.worker_python import StromSparkSetupError, check_worker_python

SRC = Path(__file__).resolve().parents[2] / "src"


def _python_without_numpy(tmp_path: Path) -> Path:
    """An executable that runs this Python with numpy missing."""
    shadow = tmp_path / "shadow" / "numpy"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'numpy'\", name='numpy')\n")
    wrapper = tmp_path / "python-without-numpy"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={shadow.parent}${{PYTHONPATH:+:$PYTHONPATH}} "
                       f"exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def _environ(**changes: str | None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def test_a_worker_python_without_numpy_is_named_by_spark_itself(tmp_path: Path) -> None:
    """A real Spark (its own JVM: the lookup runs once per session) reads and writes the
    ``strom`` format with a worker Python that lacks numpy."""
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent("""
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("OFF")
        attempts = {
            "read": lambda: spark.read.format("strom")
                .option("kafka.bootstrap.servers", "127.0.0.1:1")
                .option("subscribe", "t").load().collect(),
            "write": lambda: spark.createDataFrame([("v",)], "value string").write
                .format("strom").mode("append")
                .option("kafka.bootstrap.servers", "127.0.0.1:1").option("topic", "t").save(),
        }
        for what, attempt in attempts.items():
            try:
                attempt()
            except Exception as exc:
                print(what, "FAILED:", str(exc).replace("\\n", " "))
        spark.stop()
    """))
    env = _environ(PYSPARK_PYTHON=str(_python_without_numpy(tmp_path)))
    out = subprocess.run([sys.executable, str(job)], env=env, capture_output=True, text=True,
                         timeout=240, check=True).stdout
    failures = [line for line in out.splitlines() if " FAILED: " in line]
    assert [line.split()[0] for line in failures] == ["read", "write"]
    for line in failures:
        assert "DATA_SOURCE_NOT_FOUND" not in line
        assert "the 'strom' data source cannot be loaded by the Python" in line
        assert "No module named 'numpy'" in line
        assert f"PYSPARK_PYTHON={env['PYSPARK_PYTHON']}" in line  # how Spark chose it
        assert "pip install 'strom[spark]'" in line


def test_the_driver_check_names_a_worker_python_without_strom(tmp_path: Path) -> None:
    """PYSPARK_PYTHON unset and ``python3`` on PATH outside the virtualenv."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(os.path.realpath(sys.executable))  # no virtualenv
    env = _environ(PYSPARK_PYTHON=None, PYTHONPATH=None,
                   PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    with pytest.raises(StromSparkSetupError) as caught:
        check_worker_python({}, env)
    message = str(caught.value)
    assert message.startswith("strom is not installed in the Python that Spark runs for its "
                              f"workers, {bin_dir / 'python3'}")
    assert "PYSPARK_PYTHON is not set" in message
    assert f"PYSPARK_PYTHON={sys.executable}" in message  # the fix: the driver's Python


def test_the_driver_check_reports_what_the_worker_python_misses(tmp_path: Path) -> None:
    wrapper = _python_without_numpy(tmp_path)
    with pytest.raises(StromSparkSetupError, match="No module named 'numpy'"):
        check_worker_python({"spark.pyspark.python": str(wrapper)}, _environ())
    with pytest.raises(StromSparkSetupError, match="'/nowhere/python' is not an executable "
                                                   r"\(PYSPARK_PYTHON=/nowhere/python\)"):
        check_worker_python({}, _environ(PYSPARK_PYTHON="/nowhere/python"))
    check_worker_python({"spark.pyspark.python": sys.executable}, _environ())
