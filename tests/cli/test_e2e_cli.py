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
