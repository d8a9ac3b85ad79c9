"""CLI helpers and argument errors (no broker needed)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pytest

from strom.cli.common import (
    UsageError,
    acks_value,
    decode_escapes,
    parse_key_values,
    parse_timestamp,
)
from strom.cli.consume import Formatter
from strom.cli.perf_stats import Stats, Throttle, percentile
from strom.cli.produce import _records
from strom.client.records import ConsumerRecord
from tests.cli.conftest import Result


def test_parse_key_values() -> None:
    assert parse_key_values(["a=1", "b=x=y", "c="]) == {"a": "1", "b": "x=y", "c": ""}
    with pytest.raises(UsageError, match="--config expects KEY=VALUE, got 'oops'"):
        parse_key_values(["oops"])
    with pytest.raises(UsageError, match="--set"):
        parse_key_values(["=v"], "--set")


def test_parse_timestamp() -> None:
    assert parse_timestamp("1700000000000") == 1700000000000
    assert parse_timestamp("2024-05-01T12:00:00Z") == 1714564800000
    assert parse_timestamp("2024-05-01T12:00:00") == 1714564800000  # naive = UTC
    assert parse_timestamp("2024-05-01T14:00:00+02:00") == 1714564800000
    with pytest.raises(UsageError, match="invalid timestamp"):
        parse_timestamp("yesterday")


def test_acks_and_escapes() -> None:
    assert [acks_value(v) for v in ("0", "1", "-1", "all", "ALL")] == [0, 1, -1, -1, -1]
    with pytest.raises(argparse.ArgumentTypeError):
        acks_value("2")
    assert decode_escapes("\\t") == "\t" and decode_escapes("::") == "::"


def test_produce_line_splitting() -> None:
    import io

    lines = io.BytesIO(b"k1:v1\r\nk2:v:2\nnokey")
    parsed = _records(lines, b":")
    assert next(parsed) == (1, b"k1", b"v1")
    assert next(parsed) == (2, b"k2", b"v:2")
    with pytest.raises(UsageError, match="line 3 has no key separator ':'"):
        next(parsed)
    assert list(_records(io.BytesIO(b"a\n\nb"), None)) == [(1, None, b"a"), (2, None, b""),
                                                            (3, None, b"b")]


def test_consume_formatter() -> None:
    args = argparse.Namespace(separator="|", print_key=True, print_timestamp=True,
                              print_headers=True, print_offset=True, print_partition=True)
    record = ConsumerRecord("t", 1, 5, 1000, 0, b"k", b"v", (("h", b"x"), ("n", None)))
    assert Formatter(args).line(record) == b"CreateTime:1000|Partition:1|Offset:5|h:x,n:null|k|v\n"
    bare = ConsumerRecord("t", 0, 0, 2, 1, None, None)
    assert Formatter(args).line(bare) == (
        b"LogAppendTime:2|Partition:0|Offset:0|NO_HEADERS|null|null\n"
    )


def test_perf_stats() -> None:
    stats = Stats(10)
    for latency in range(1, 11):
        stats.record(float(latency), 100)
    assert stats.count == 10 and stats.bytes == 1000
    assert percentile(sorted(stats.samples), 0.5) == 5.0
    assert percentile(sorted(stats.samples), 0.99) == 10.0
    assert percentile([], 0.5) == 0.0
    assert "10 records sent" in stats.window_line()
    summary = stats.summary()
    assert "5 ms 50th" in summary and "10 ms 99th" in summary
    assert Throttle(-1).delay(1000) == 0.0
    assert Throttle(10).delay(100) > 5


def test_sampling_bounds_memory() -> None:
    stats = Stats(1_000_000, max_samples=1000)
    for _ in range(10_000):
        stats.record(1.0, 1)
    assert len(stats.samples) == 10


@pytest.mark.parametrize(("args", "message"), [
    (["topics", "alter", "t"], "nothing to alter"),
    (["topics", "alter", "t", "--config", "a=1", "--delete-config", "a"], "both set and deleted"),
    (["topics", "create", "t", "--config", "novalue"], "--config expects KEY=VALUE"),
    (["configs", "alter", "--topic", "t"], "nothing to alter"),
    (["configs", "describe", "--broker", "x"], "numeric broker id"),
    (["configs", "describe", "--entity-type", "brokers", "--entity-name", "x"],
     "numeric broker id"),
    (["consume", "t", "--offset", "abc"], "--offset expects a number"),
    (["consume", "t", "--from-timestamp", "soon"], "invalid timestamp"),
    (["produce", "t", "--acks", "1", "--idempotent"], "--idempotent needs --acks all"),
])
def test_usage_errors_are_one_line(cli: Callable[..., Result], args: list[str],
                                   message: str) -> None:
    result = cli(*args, "--bootstrap-server", "127.0.0.1:1")
    assert result.code == 1
    assert message in result.err
    assert result.err.count("\n") == 1 and "Traceback" not in result.err


@pytest.mark.parametrize("args", [
    ["topics", "create", "t", "--partitions", "0"],
    ["consume", "t", "--from-beginning", "--offset", "3"],
    ["configs", "describe"],
    ["configs", "describe", "--entity-name", "0"],
    ["configs", "describe", "--entity-type", "brokers"],
    ["configs", "describe", "--entity-type", "topics", "--entity-default"],
    ["configs", "describe", "--topic", "t", "--entity-type", "topics"],
    ["perf", "produce", "--topic", "t"],
])
def test_argparse_errors(cli: Callable[..., Result], args: list[str]) -> None:
    result = cli(*args)
    assert result.code == 2 and "usage:" in result.err


def test_unreachable_broker_is_one_clear_line(cli: Callable[..., Result]) -> None:
    result = cli("topics", "list", "--bootstrap-server", "127.0.0.1:1")
    assert result.code == 1
    assert result.err.startswith("strom topics: error: NETWORK_EXCEPTION")
    assert "could not connect to 127.0.0.1:1" in result.err
    assert "Traceback" not in result.err


def test_bad_bootstrap(cli: Callable[..., Result]) -> None:
    result = cli("topics", "list", "--bootstrap-server", "nonsense")
    assert result.code == 1 and "expected HOST:PORT" in result.err


def test_cluster_up_without_zookeeper_installed_is_one_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """A machine without Debian's zookeeper package: `strom cluster up` names what is missing
    in one line and exits 1 (it used to end in a RuntimeError traceback from the JVM's exit)."""
    import strom.cli.zookeeper_server as zookeeper_server
    from strom.cli.main import main

    monkeypatch.setattr(zookeeper_server, "JAVA_DIR", tmp_path / "no-java-here")
    assert main(["cluster", "up", "--brokers", "1", "--data-dir", str(tmp_path / "c")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "apt-get install zookeeper" in err, err
    assert "Traceback" not in err
