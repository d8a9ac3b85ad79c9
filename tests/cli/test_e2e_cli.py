"""CLI commands against a real strom broker (the ``strom_broker`` fixture)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.cli.conftest import Result


def bootstrap_of(broker: Any) -> str:
    return str(getattr(broker, "bootstrap", broker))


def test_topics_produce_consume_configs(cli: Callable[..., Result], strom_broker: Any) -> None:
    b = ["--bootstrap-server", bootstrap_of(strom_broker)]
    name = f"cli-{uuid.uuid4().hex[:8]}"
    created = cli("topics", "create", name, "--partitions", "2", "--replication-factor", "1",
                  "--config", "retention.ms=86400000", *b)
    assert created.code == 0, created.err
    assert name in cli("topics", "list", *b).out.split()
    described = cli("topics", "describe", name, *b)
    assert described.code == 0, described.err
    assert "PartitionCount: 2" in described.out and "retention.ms=86400000" in described.out
    assert "Partition: 1\tLeader: " in described.out

    produced = cli("produce", name, "--key-separator", "=", "--header", "src=cli",
                   "--compression", "zstd", "--idempotent", *b,
                   stdin="".join(f"k{i}=v{i}\n" for i in range(20)))
    assert produced.code == 0, produced.err
    consumed = cli("consume", name, "--from-beginning", "--max-messages", "20", "--print-key",
                   "--print-headers", "--separator", "|", *b)
    assert consumed.code == 0, consumed.err
    assert sorted(consumed.out.splitlines()) == sorted(
        f"src:cli|k{i}|v{i}" for i in range(20)
    )
    one = cli("consume", name, "--partition", "0", "--offset", "0", "--max-messages", "1",
              "--print-offset", "--print-partition", "--print-timestamp", *b)
    assert one.code == 0 and "CreateTime:" in one.out and "Partition:0\tOffset:0\t" in one.out
    idle = cli("consume", name, "--timeout-ms", "300", *b)
    assert idle.code == 0 and idle.out == ""
    since = cli("consume", name, "--from-timestamp", "2000-01-01T00:00:00Z", "--max-messages",
                "20", *b)
    assert len(since.out.splitlines()) == 20

    assert cli("configs", "alter", "--topic", name, "--set", "cleanup.policy=compact",
               "--delete", "retention.ms", *b).code == 0
    shown = cli("configs", "describe", "--topic", name, *b)
    assert "cleanup.policy=compact" in shown.out and "retention.ms" not in shown.out
    everything = cli("configs", "describe", "--topic", name, "--all", "--synonyms", *b)
    assert "segment.bytes=" in everything.out and "synonyms:" in everything.out
    broker = cli("configs", "describe", "--broker", "0", "--all", *b)
    assert broker.code == 0 and "log.retention.hours" in broker.out
    bad = cli("configs", "alter", "--topic", name, "--set", "retention.ms=abc", *b)
    assert bad.code == 1 and "INVALID_CONFIG" in bad.err

    assert cli("topics", "alter", name, "--partitions", "3", *b).code == 0
    shrink = cli("topics", "alter", name, "--partitions", "1", *b)
    assert shrink.code == 1 and "INVALID_PARTITIONS" in shrink.err
    assert cli("topics", "delete", name, *b).code == 0
    gone = cli("topics", "describe", name, *b)
    assert gone.code == 1 and "does not exist" in gone.err


def test_internal_topic_delete_is_refused(cli: Callable[..., Result], strom_broker: Any) -> None:
    b = ["--bootstrap-server", bootstrap_of(strom_broker)]
    name = f"cli-{uuid.uuid4().hex[:8]}"
    group = f"g-{name}"
    assert cli("topics", "create", name, *b).code == 0
    assert cli("produce", name, *b, stdin="a\nb\n").code == 0
    reset = cli("groups", "reset-offsets", group, "--topic", name, "--to-latest", "--execute",
                *b)
    assert reset.code == 0, reset.err
    refused = cli("topics", "delete", "__consumer_offsets", *b)
    assert refused.code == 1
    assert "Topic __consumer_offsets is an internal topic and cannot be deleted" in refused.err
    assert "__consumer_offsets" in cli("topics", "list", "--include-internal", *b).out
    described = cli("groups", "describe", group, *b)
    assert described.code == 0 and name in described.out, described.err


def test_perf_and_dump_log(cli: Callable[..., Result], strom_broker: Any) -> None:
    b = ["--bootstrap-server", bootstrap_of(strom_broker)]
    name = f"perf-{uuid.uuid4().hex[:8]}"
    assert cli("topics", "create", name, "--partitions", "1", *b).code == 0
    produced = cli("perf", "produce", "--topic", name, "--num-records", "2000",
                   "--record-size", "100", "--compression", "lz4", *b)
    assert produced.code == 0, produced.err
    assert produced.out.startswith("2000 records sent")
    consumed = cli("perf", "consume", "--topic", name, "--num-records", "2000", *b)
    assert consumed.code == 0, consumed.err
    assert consumed.out.startswith("2000 records consumed")
    data_dir = getattr(strom_broker, "data_dir", None)
    if data_dir is None:
        return
    partition = Path(data_dir) / f"{name}-0"
    dumped = cli("dump-log", str(partition), "--verify-index")
    assert dumped.code == 0, dumped.out
    assert "compresscodec: lz4" in dumped.out and "crcValid: true" in dumped.out


def test_configs_of_brokers_like_kafka_configs(cli: Callable[..., Result],
                                               strom_broker_factory: Any) -> None:
    broker = strom_broker_factory({"log.retention.hours": "2"})
    b = ["--bootstrap-server", broker.bootstrap]
    brokers = ["--entity-type", "brokers"]
    assert "(none)" in cli("configs", "describe", *brokers, "--entity-name", "0", *b).out
    set_one = cli("configs", "alter", *brokers, "--entity-name", "0",
                  "--set", "log.retention.ms=3600000", *b)
    assert set_one.code == 0, set_one.err
    assert set_one.out == "Updated config of broker 0.\n"
    set_default = cli("configs", "alter", *brokers, "--entity-default",
                      "--set", "log.segment.bytes=1048576",
                      "--set", "log.message.downconversion.enable=false", *b)
    assert set_default.code == 0, set_default.err
    assert "WARNING: Configuration log.message.downconversion.enable is accepted but ignored" in (
        set_default.err)
    one = cli("configs", "describe", *brokers, "--entity-name", "0", "--synonyms", *b)
    assert "  log.retention.ms=3600000  (DYNAMIC_BROKER_CONFIG)" in one.out
    assert ("synonyms: DYNAMIC_BROKER_CONFIG:log.retention.ms=3600000, "
            "STATIC_BROKER_CONFIG:log.retention.hours=2") in one.out
    assert "log.segment.bytes" not in one.out  # the default's, not this broker's own
    default = cli("configs", "describe", *brokers, "--entity-default", *b)
    assert default.out.splitlines() == [
        "Configs of the brokers' cluster-wide default (dynamic configs):",
        "  log.message.downconversion.enable=false  (DYNAMIC_DEFAULT_BROKER_CONFIG)",
        "  log.segment.bytes=1048576  (DYNAMIC_DEFAULT_BROKER_CONFIG)"]
    everything = cli("configs", "describe", "--broker", "0", "--all", *b)
    assert "  log.segment.bytes=1048576  (DYNAMIC_DEFAULT_BROKER_CONFIG)" in everything.out
    assert "  log.retention.hours=2  (STATIC_BROKER_CONFIG, read-only)" in everything.out
    refused = cli("configs", "alter", *brokers, "--entity-default", "--set", "log.dirs=/x", *b)
    assert refused.code == 1 and "INVALID_REQUEST" in refused.err
    assert "Cannot update these configs dynamically: Set(log.dirs)" in refused.err
    checked = cli("configs", "alter", *brokers, "--entity-name", "0", "--validate-only",
                  "--delete", "log.retention.ms", *b)
    assert checked.out == "Validated config of broker 0.\n"
    assert cli("configs", "alter", *brokers, "--entity-name", "0", "--delete",
               "log.retention.ms", *b).code == 0
    assert "(none)" in cli("configs", "describe", *brokers, "--entity-name", "0", *b).out
    topic = cli("topics", "create", "legacy", "--config", "message.format.version=2.8", *b)
    assert topic.code == 0, topic.err
    assert "WARNING: Configuration message.format.version is accepted but ignored" in topic.err
    described = cli("configs", "describe", "--entity-type", "topics", "--entity-name",
                    "legacy", *b)
    assert "  message.format.version=2.8  (DYNAMIC_TOPIC_CONFIG)" in described.out
