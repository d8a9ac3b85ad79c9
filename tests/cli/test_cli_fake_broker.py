"""CLI commands end to end against the in-process fake broker."""

from __future__ import annotations

from collections.abc import Callable

from tests.cli.conftest import Result
from tests.client.fake_broker import FakeBroker


def test_topics_lifecycle(cli: Callable[..., Result], fake_broker: FakeBroker) -> None:
    b = ["--bootstrap-server", fake_broker.bootstrap]
    created = cli("topics", "create", "orders", "--partitions", "2", "--config",
                  "retention.ms=1000", *b)
    assert created.code == 0, created.err
    assert "Created topic orders with 2 partition(s)" in created.out
    again = cli("topics", "create", "orders", *b)
    assert again.code == 1 and "TOPIC_ALREADY_EXISTS" in again.err
    assert cli("topics", "create", "orders", "--if-not-exists", *b).code == 0
    assert cli("topics", "list", *b).out == "orders\n"
    fake_broker.configs["orders"] = {"retention.ms": "1000"}
    described = cli("topics", "describe", "orders", *b)
    assert described.code == 0, described.err
    lines = described.out.splitlines()
    assert lines[0].startswith("Topic: orders\t") and "PartitionCount: 2" in lines[0]
    assert "Configs: retention.ms=1000" in lines[0]
    assert lines[1] == "\tTopic: orders\tPartition: 0\tLeader: 0\tReplicas: 0\tIsr: 0"
    altered = cli("topics", "alter", "orders", "--partitions", "3", "--config",
                  "cleanup.policy=compact", "--delete-config", "retention.ms", *b)
    assert altered.code == 0, altered.err
    assert fake_broker.configs["orders"] == {"cleanup.policy": "compact"}
    assert len(fake_broker.topics["orders"]) == 3
    shrink = cli("topics", "alter", "orders", "--partitions", "1", *b)
    assert shrink.code == 1 and "INVALID_PARTITIONS" in shrink.err
    assert cli("topics", "delete", "orders", *b).code == 0
    missing = cli("topics", "delete", "orders", *b)
    assert missing.code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.err
    assert cli("topics", "delete", "orders", "--if-exists", *b).code == 0
    nothing = cli("topics", "describe", "orders", *b)
    assert nothing.code == 1 and "does not exist" in nothing.err


def test_produce_then_consume(cli: Callable[..., Result], fake_broker: FakeBroker) -> None:
    b = ["--bootstrap-server", fake_broker.bootstrap]
    fake_broker.create("events", 1)
    produced = cli("produce", "events", "--key-separator", ":", "--header", "src=test",
                   "--compression", "lz4", *b, stdin="k1:hello\nk2:world:!\n")
    assert produced.code == 0, produced.err
    assert "2 records written to events" in produced.err
    consumed = cli("consume", "events", "--from-beginning", "--max-messages", "2",
                   "--print-key", "--print-offset", "--print-headers", *b)
    assert consumed.code == 0, consumed.err
    assert consumed.out == ("Offset:0\tsrc:test\tk1\thello\n"
                            "Offset:1\tsrc:test\tk2\tworld:!\n")
    assert "Processed a total of 2 messages" in consumed.err
    # --offset, and exit on --timeout-ms when idle.
    tail = cli("consume", "events", "--offset", "1", "--timeout-ms", "300", *b)
    assert tail.code == 0 and tail.out == "world:!\n"
    # Starting at the end sees nothing new.
    idle = cli("consume", "events", "--timeout-ms", "200", "-q", *b)
    assert idle.code == 0 and idle.out == "" and idle.err == ""


def test_produce_to_missing_partition(cli: Callable[..., Result],
                                      fake_broker: FakeBroker) -> None:
    fake_broker.create("one", 1)
    result = cli("produce", "one", "--partition", "3", "-b", fake_broker.bootstrap,
                 stdin="x\n")
    assert result.code == 1 and "partition 3 of topic 'one' does not exist" in result.err


def test_configs_describe_and_alter(cli: Callable[..., Result], fake_broker: FakeBroker) -> None:
    b = ["--bootstrap-server", fake_broker.bootstrap]
    fake_broker.create("c", 1)
    assert cli("configs", "alter", "--topic", "c", "--set", "retention.ms=5", *b).code == 0
    overrides = cli("configs", "describe", "--topic", "c", "--synonyms", *b)
    assert overrides.code == 0, overrides.err
    assert "  retention.ms=5  (DYNAMIC_TOPIC_CONFIG)" in overrides.out
    assert "synonyms: DYNAMIC_TOPIC_CONFIG:retention.ms=5" in overrides.out
    assert "segment.bytes" not in overrides.out
    everything = cli("configs", "describe", "--topic", "c", "--all", *b)
    assert "segment.bytes=1073741824  (DEFAULT_CONFIG)" in everything.out
    assert cli("configs", "alter", "--topic", "c", "--delete", "retention.ms", *b).code == 0
    assert "(none)" in cli("configs", "describe", "--topic", "c", *b).out


def test_perf_produce_and_consume(cli: Callable[..., Result], fake_broker: FakeBroker) -> None:
    b = ["--bootstrap-server", fake_broker.bootstrap]
    fake_broker.create("perf", 2)
    produced = cli("perf", "produce", "--topic", "perf", "--num-records", "500",
                   "--record-size", "100", *b)
    assert produced.code == 0, produced.err
    assert produced.out.startswith("500 records sent, ") and "ms 99th" in produced.out
    consumed = cli("perf", "consume", "--topic", "perf", "--num-records", "500", *b)
    assert consumed.code == 0, consumed.err
    assert consumed.out.startswith("500 records consumed, ")
