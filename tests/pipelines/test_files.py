"""Files → topic: JSON lines with an inferred schema across restarts, CSV with a given one."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

from strom.pipelines import AVAILABLE_NOW, Endpoint, PipelineError, files_to_topic
from strom.testing import EmbeddedBroker
from tests.pipelines.helpers import finish, new_topic, read_topic, text


def _drop(directory: Path, name: str, content: str) -> None:
    """Write a file elsewhere, then move it in (what the pipeline asks of producers)."""
    staging = directory.parent / f".{name}.tmp"
    staging.write_text(content, encoding="utf-8")
    os.replace(staging, directory / name)


def _json_lines(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _rows(start: int, count: int) -> list[dict[str, Any]]:
    return [{"id": i, "name": f"n{i}", "score": i / 2, "tag": None if i % 2 else "even"}
            for i in range(start, start + count)]


def _records(broker: EmbeddedBroker, topic: str) -> list[tuple[str | None, dict[str, Any]]]:
    return sorted(((text(r.key), json.loads(text(r.value) or "null"))
                   for r in read_topic(broker.bootstrap, topic)), key=lambda kv: kv[1]["id"])


def test_json_files_become_records_once(spark: Any, broker: EmbeddedBroker,
                                        tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    _drop(inbox, "a.json", _json_lines(_rows(0, 3)))
    _drop(inbox, "b.json", _json_lines(_rows(3, 3)))
    topic = new_topic(broker.bootstrap, "files")

    def run() -> None:
        finish(files_to_topic(spark, inbox, Endpoint(broker.bootstrap, topic), tmp_path / "cp",
                              AVAILABLE_NOW, key_column="id"))

    run()
    assert _records(broker, topic) == [(str(r["id"]), r) for r in _rows(0, 6)]
    _drop(inbox, "c.json", _json_lines(_rows(6, 4)))
    run()
    assert _records(broker, topic) == [(str(r["id"]), r) for r in _rows(0, 10)]


def test_csv_files_with_a_given_schema(spark: Any, broker: EmbeddedBroker,
                                       tmp_path: Path) -> None:
    inbox = tmp_path / "csv"
    inbox.mkdir()
    _drop(inbox, "x.csv", "id,city\n1,Oslo\n2,Lima\n")
    topic = new_topic(broker.bootstrap, "csv")
    finish(files_to_topic(spark, inbox, Endpoint(broker.bootstrap, topic), tmp_path / "cp",
                          AVAILABLE_NOW, file_format="csv", schema="id int, city string"))
    assert _records(broker, topic) == [(None, {"id": 1, "city": "Oslo"}),
                                       (None, {"id": 2, "city": "Lima"})]


def test_an_empty_directory_needs_a_schema(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(PipelineError, match="give the schema"):
        files_to_topic(spark, tmp_path, Endpoint("127.0.0.1:1", "t"), tmp_path / "cp")
