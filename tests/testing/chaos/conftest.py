"""The long fault schedules run only when asked for.

A test marked ``faults_extended`` (the RF=3 schedules left out of the default run to keep the
suite within its CI budget) is skipped unless the ``-m`` expression names ``faults``:
``pytest -m faults tests/testing/chaos`` runs every schedule, a plain ``pytest`` run keeps the
representative subset (the tests marked ``faults`` only)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "faults_extended: a fault schedule run only with -m faults")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "faults" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="long fault schedule: run with -m faults")
    for item in items:
        if item.get_closest_marker("faults_extended") is not None:
            item.add_marker(skip)
