"""Option parsing of the strom data source (no Spark session needed)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

from strom.spark.options import (
    EARLIEST,
    LATEST,
    StromSourceOptionError,
    parse_source_options,
)

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_subscribe_list() -> None:
    opts = parse_source_options({**BOOT, "subscribe": "a, b"})
    assert opts.strategy == "subscribe"
    assert opts.topics == ("a", "b")
    assert opts.starting.default == EARLIEST and opts.ending.default == LATEST


def test_assign_and_offsets_json() -> None:
    opts = parse_source_options({
        **BOOT, "assign": '{"t": [0, 1]}',
        "startingOffsets": '{"t": {"0": 5, "1": -2}}', "endingOffsets": '{"t": {"0": -1}}',
    })
    assert opts.assignment == (("t", 0), ("t", 1))
    assert opts.starting.for_partition("t", 0) == 5
    assert opts.starting.for_partition("t", 1) == EARLIEST
    assert opts.ending.for_partition("t", 0) == LATEST


@pytest.mark.parametrize(("options", "message"), [
    ({"subscribe": "a"}, "kafka.bootstrap.servers"),
    (BOOT, "exactly one of"),
    ({**BOOT, "subscribe": "a", "assign": '{"a": [0]}'}, "exactly one of"),
    ({**BOOT, "subscribePattern": "("}, "not a valid regex"),
    ({**BOOT, "assign": "[0]"}, "assign"),
    ({**BOOT, "subscribe": "a", "startingOffsets": "oldest"}, "startingOffsets"),
    ({**BOOT, "subscribe": "a", "endingOffsets": "earliest"}, "endingOffsets"),
    ({**BOOT, "subscribe": "a", "endingOffsets": '{"a": {"0": -2}}'}, "earliest"),
    ({**BOOT, "subscribe": "a", "includeHeaders": "yes"}, "includeHeaders"),
])
def test_option_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(StromSourceOptionError, match=message):
        parse_source_options(options)
