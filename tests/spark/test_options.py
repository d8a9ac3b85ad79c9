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
    opts = parse_source_options({**BOOT, "subscribe": "a, b"}, streaming=False)
    assert opts.strategy == "subscribe"
    assert opts.topics == ("a", "b")
    assert opts.starting.default == EARLIEST and opts.ending.default == LATEST


def test_starting_offsets_default_as_spark_kafka() -> None:
    """Spark's Kafka source: a batch query starts at the earliest offsets, a stream at the
    latest; an explicit startingOffsets wins either way."""
    assert parse_source_options({**BOOT, "subscribe": "a"}, streaming=True).starting \
        .default == LATEST
    assert parse_source_options({**BOOT, "subscribe": "a"}, streaming=False).starting \
        .default == EARLIEST
    earliest = {**BOOT, "subscribe": "a", "startingOffsets": "earliest"}
    assert parse_source_options(earliest, streaming=True).starting.default == EARLIEST


def test_assign_and_offsets_json() -> None:
    opts = parse_source_options({
        **BOOT, "assign": '{"t": [0, 1]}',
        "startingOffsets": '{"t": {"0": 5, "1": -2}}', "endingOffsets": '{"t": {"0": -1}}',
    }, streaming=False)
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
        parse_source_options(options, streaming=False)


def test_streaming_and_timestamp_options() -> None:
    opts = parse_source_options({
        **BOOT, "subscribe": "a", "maxOffsetsPerTrigger": "100", "minOffsetsPerTrigger": "10",
        "maxTriggerDelay": "30s", "failOnDataLoss": "false", "minPartitions": "4",
        "startingOffsetsByTimestamp": '{"a": {"0": 1000}}', "startingTimestamp": "5",
        "commitOffsetsToGroup": "g", "kafka.client.id": "me",
    }, streaming=True)
    assert (opts.max_offsets_per_trigger, opts.min_offsets_per_trigger) == (100, 10)
    assert opts.max_trigger_delay_ms == 30_000
    assert opts.fail_on_data_loss is False and opts.min_partitions == 4
    assert opts.starting_by_timestamp is not None
    assert opts.starting_by_timestamp.for_partition("a", 0) == 5  # startingTimestamp wins
    assert opts.commit_group == "g" and opts.client.client_id == "me"
    assert parse_source_options({**BOOT, "subscribe": "a"},
                                streaming=True).fail_on_data_loss is True


def test_writer_client_settings() -> None:
    from strom.spark.options import parse_sink_options
    opts = parse_sink_options({**BOOT, "kafka.acks": "1", "kafka.compression.type": "lz4",
                               "kafka.linger.ms": "20"})
    assert opts.client.acks == 1 and opts.client.idempotent is False  # as Kafka's producer
    assert opts.client.compression == "lz4" and opts.client.linger_ms == 20.0
    with pytest.raises(ValueError, match="idempotence"):
        parse_sink_options({**BOOT, "kafka.acks": "0", "kafka.enable.idempotence": "true"})
    with pytest.raises(ValueError, match="serializer"):
        parse_sink_options({**BOOT, "kafka.value.serializer": "x"})


def test_exactly_once_options() -> None:
    from strom.spark.options import ExactlyOnceOptions, parse_sink_options
    assert parse_sink_options(BOOT).exactly_once is None
    batch = parse_sink_options({**BOOT, "exactlyOnce": "true", "writeId": "nightly",
                                "batchId": "7", "kafka.transaction.timeout.ms": "9000"})
    assert batch.exactly_once == ExactlyOnceOptions("strom-spark", "nightly", 7)
    assert batch.client.transaction_timeout_ms == 9000
    stream = parse_sink_options({**BOOT, "exactlyOnce": "TRUE",
                                 "transactionalIdPrefix": "etl"}, streaming=True)
    assert stream.exactly_once == ExactlyOnceOptions("etl", None, 0)


@pytest.mark.parametrize(("options", "streaming", "message"), [
    ({"exactlyOnce": "true"}, False, "needs option 'writeId'"),
    ({"exactlyOnce": "true", "writeId": "w", "batchId": "-1"}, False, "'batchId' must be"),
    ({"exactlyOnce": "true", "writeId": "w"}, True, "'writeId' is for batch writes"),
    ({"exactlyOnce": "true", "batchId": "3"}, True, "'batchId' is for batch writes"),
    ({"writeId": "w"}, False, "'writeId' needs exactlyOnce=true"),
    ({"exactlyOnce": "yes"}, True, "'exactlyOnce' must be true or false"),
    ({"exactlyOnce": "true", "kafka.acks": "1"}, True, "kafka.acks=all"),
    ({"exactlyOnce": "true", "kafka.enable.idempotence": "false"}, True, "idempotence"),
    ({"exactlyOnce": "true", "transactionalIdPrefix": " "}, True, "must not be empty"),
])
def test_exactly_once_option_errors(options: dict[str, str], streaming: bool,
                                    message: str) -> None:
    from strom.spark.options import StromSourceOptionError, parse_sink_options
    with pytest.raises(StromSourceOptionError, match=message):
        parse_sink_options({**BOOT, **options}, streaming=streaming)


@pytest.mark.parametrize(("options", "message"), [
    ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
    ({"minPartitions": "x"}, "minPartitions"),
    ({"maxTriggerDelay": "soon"}, "maxTriggerDelay"),
    ({"failOnDataLoss": "maybe"}, "failOnDataLoss"),
    ({"startingTimestamp": "yesterday"}, "startingTimestamp"),
    ({"startingOffsetsByTimestamp": '{"a": {"0": -5}}'}, "startingOffsetsByTimestamp"),
    ({"startingOffsetsByTimestampStrategy": "skip"}, "Strategy"),
    ({"kafka.auto.offset.reset": "earliest"}, "startingOffsets"),
    ({"kafka.security.protocol": "SSL"}, "PLAINTEXT"),
    ({"kafka.fetch.max.bytes": "-1"}, "fetch.max.bytes"),
])
def test_streaming_option_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_source_options({**BOOT, "subscribe": "a", **options}, streaming=True)
