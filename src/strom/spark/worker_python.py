"""Which Python Spark runs for its workers, and whether it can load the ``strom`` format.

Spark registers Python data sources by importing top-level ``pyspark_*`` modules in the
Python it starts for its workers, chosen as ``spark.pyspark.python``, else ``$PYSPARK_PYTHON``,
else ``python3`` from PATH — not the driver's interpreter. A virtualenv that is not activated
is therefore not used, and Spark reports only ``DATA_SOURCE_NOT_FOUND: strom``.

- :func:`check_worker_python` (driver side) starts that Python the way Spark does (PySpark's
  own zips on ``PYTHONPATH``, then the driver's ``PYTHONPATH``), imports ``pyspark_strom``
  and raises :class:`StromSparkSetupError` naming the Python, what is missing and the fix.
- :func:`load_error` (worker side) is the message of ``pyspark_strom``'s stand-in format
  when the data source does not import in the worker.

Only the standard library is imported here: both must work where the data source's
dependencies are missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from strom.common.errors import StromError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PYTHON_SETTING = "spark.pyspark.python"
PYTHON_ENV = "PYSPARK_PYTHON"
SPARK_DEFAULT_PYTHON = "python3"
LOAD_ERROR_PREFIX = "the 'strom' data source cannot be loaded by the Python"
_PROBE = "import sys, pyspark_strom\nsys.exit(pyspark_strom.LOAD_ERROR)\n"
_CHECK_TIMEOUT_S = 120.0


class StromSparkSetupError(StromError, RuntimeError):
    """The Python that Spark runs for its workers cannot load strom's data source."""


@dataclass(frozen=True, slots=True)
class WorkerPython:
    """The worker Python as Spark chooses it: the command, the knob that chose it (the one
    to change), and a sentence saying so."""

    command: str
    knob: str
    chosen: str


def worker_python(settings: Mapping[str, str], environ: Mapping[str, str]) -> WorkerPython:
    """The Python Spark starts for its workers, given the session's settings and environment."""
    if settings.get(PYTHON_SETTING):
        value = settings[PYTHON_SETTING]
        return WorkerPython(value, PYTHON_SETTING, f"{PYTHON_SETTING}={value}")
    if environ.get(PYTHON_ENV):
        return WorkerPython(environ[PYTHON_ENV], PYTHON_ENV,
                            f"{PYTHON_ENV}={environ[PYTHON_ENV]}")
    return WorkerPython(SPARK_DEFAULT_PYTHON, PYTHON_ENV,
                        f"{PYTHON_ENV} is not set, so Spark runs `python3` from PATH; a "
                        "virtualenv that is not activated is not on PATH")


def load_error(exc: ImportError) -> str:
    """What ``pyspark_strom`` reports when it cannot import the data source in a worker:
    this interpreter, how Spark chose it, the missing module, and the two ways out."""
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    reason = f"No module named {missing!r}" if missing else f"{type(exc).__name__}: {exc}"
    chosen = worker_python({}, os.environ).chosen
    return (f"{LOAD_ERROR_PREFIX} that Spark runs for its workers, {sys.executable} "
            f"({chosen}): {reason}. Either install strom with its Spark extras into that "
            f"Python ({sys.executable} -m pip install 'strom[spark]'), or point Spark at the "
            f"Python where they are installed: set {PYTHON_ENV} (or the {PYTHON_SETTING} "
            f"setting) to it, e.g. {PYTHON_ENV}=$(which python)")


def _point_at_driver(knob: str) -> str:
    return (f"set {knob} to a Python where strom is installed with its Spark extras (this "
            f"driver runs one: {knob}={sys.executable})")


def _spark_pythonpath(environ: Mapping[str, str]) -> str:
    """PYTHONPATH as Spark gives it to a worker: PySpark's zips, then the driver's own."""
    parts: list[str] = []
    try:
        import pyspark
    except ImportError:
        pass
    else:
        lib = Path(pyspark.__file__).parent / "python" / "lib"
        parts.extend(str(p) for p in sorted(lib.glob("*.zip")))
    if environ.get("PYTHONPATH"):
        parts.append(environ["PYTHONPATH"])
    return os.pathsep.join(parts)


def check_worker_python(spark: SparkSession | Mapping[str, str] | None = None,
                        environ: Mapping[str, str] | None = None) -> None:
    """Raise :class:`StromSparkSetupError` unless Spark's worker Python loads ``strom``.

    ``spark`` is the session (its settings are read) or the settings themselves;
    ``environ`` defaults to this process's environment, which Spark's workers inherit.
    Takes as long as that Python needs to import PySpark and the data source (about a
    second).
    """
    environ = os.environ if environ is None else environ
    if spark is None or isinstance(spark, Mapping):
        settings = dict(spark or {})
    else:
        settings = dict(spark.sparkContext.getConf().getAll())
    python = worker_python(settings, environ)
    resolved = shutil.which(python.command, path=environ.get("PATH"))
    if resolved is None:
        raise StromSparkSetupError(
            f"Spark cannot start its Python workers: {python.command!r} is not an executable "
            f"({python.chosen}); {_point_at_driver(python.knob)}")
    env = {**environ, "PYTHONPATH": _spark_pythonpath(environ)}
    try:
        probe = subprocess.run([resolved, "-c", _PROBE], env=env, capture_output=True,
                               text=True, timeout=_CHECK_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StromSparkSetupError(
            f"Spark's worker Python {resolved} ({python.chosen}) did not run: {exc}") from None
    if probe.returncode == 0:
        return
    lines = [line.strip() for line in probe.stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else f"exit code {probe.returncode}"
    if LOAD_ERROR_PREFIX in last:  # pyspark_strom.LOAD_ERROR says it all
        raise StromSparkSetupError(last[last.index(LOAD_ERROR_PREFIX):])
    what = ("strom is not installed in" if "No module named 'pyspark_strom'" in last
            else f"strom's data source does not load ({last}) in")
    raise StromSparkSetupError(
        f"{what} the Python that Spark runs for its workers, {resolved} ({python.chosen}): "
        f"{_point_at_driver(python.knob)}, or install strom there ({resolved} -m pip "
        "install 'strom[spark]')")
