"""The shared settings: sources, endpoints and triggers as strom source / sink options."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

from strom.pipelines import AVAILABLE_NOW, CONTINUOUS, Endpoint, PipelineError, Source, Trigger


def test_source_options() -> None:
    source = Source("b:9092", ("a", "b"), max_offsets_per_trigger=100,
                    options={"failOnDataLoss": "false"})
    assert source.reader_options(include_headers=True) == {
        "kafka.bootstrap.servers": "b:9092", "startingOffsets": "earliest",
        "subscribe": "a,b", "maxOffsetsPerTrigger": "100", "includeHeaders": "true",
        "failOnDataLoss": "false"}
    assert Source("b:9092", pattern="orders-.*", starting_offsets="latest").reader_options() == {
        "kafka.bootstrap.servers": "b:9092", "startingOffsets": "latest",
        "subscribePattern": "orders-.*"}
    assert Source("b:9092", "events").topics == ("events",)  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs", [{}, {"topics": ("a",), "pattern": "a.*"}])
def test_a_source_needs_topics_or_a_pattern(kwargs: dict[str, object]) -> None:
    with pytest.raises(PipelineError, match="topics or a pattern"):
        Source("b:9092", **kwargs)


def test_endpoint_options() -> None:
    table = Endpoint("b:9092", "customers", {"kafka.client.id": "x"})
    assert table.writer_options() == {"kafka.bootstrap.servers": "b:9092",
                                      "topic": "customers", "kafka.client.id": "x"}
    assert table.reader_options()["endingOffsets"] == "latest"
    with pytest.raises(PipelineError):
        Endpoint("b:9092", "")


def test_triggers() -> None:
    assert AVAILABLE_NOW.available_now and not CONTINUOUS.available_now
    assert Trigger(interval="10 seconds").interval == "10 seconds"
