"""ruff, mypy and the import-linter layer contracts run as part of the test suite."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff() -> None:
    result = run(sys.executable, "-m", "ruff", "check", "src", "tests", "bench")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy() -> None:
    result = run(sys.executable, "-m", "mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_layers() -> None:
    # The interpreter's own scripts directory first: a virtualenv used without activating it.
    beside = Path(sys.executable).parent / "lint-imports"
    exe = str(beside) if beside.exists() else shutil.which("lint-imports")
    if exe is None:
        pytest.fail("import-linter is not installed (pip install -e '.[test]')")
    result = run(exe)
    assert result.returncode == 0, result.stdout + result.stderr
