"""Client settings on the command line: Java properties files and their precedence."""

from __future__ import annotations

import argparse
import asyncio
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.cli.client_props import client_settings, parse_properties, read_properties
from strom.cli.common import UsageError
from strom.cli.main import build_parser
from tests.cli.conftest import Result
from tests.client.producer_helpers import make_topic, read_all


def test_java_properties_syntax() -> None:
    text = (
        "# a comment\n"
        "! another\n"
        "\n"
        "   client.id = my-client  \n"
        "acks:all\n"
        "linger.ms 20\n"
        "bootstrap.servers=a:1,\\\n"
        "        b:2\n"
        "key\\ with\\=odd\\:chars = tab\\there\\u00e9\n"
        "empty=\n"
        "only-key\n"
        "trailing=backslash\\\\\n"
        "acks=1\n"
    )
    assert parse_properties(text) == {
        "client.id": "my-client  ",  # Java keeps trailing blanks of a value
        "acks": "1",  # the later line wins
        "linger.ms": "20",
        "bootstrap.servers": "a:1,b:2",
        "key with=odd:chars": "tab\thereé",
        "empty": "",
        "only-key": "",
        "trailing": "backslash\\",
    }


def test_malformed_unicode_escape() -> None:
    with pytest.raises(UsageError, match=r"line 2 has a malformed \\uXXXX escape"):
        parse_properties("a=1\nb=\\u00zz\n", "client.properties")


def test_read_properties_falls_back_to_latin1(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_bytes(b"client.id=caf\xe9\n")
    assert read_properties(path) == {"client.id": "café"}


def test_precedence_file_then_properties_then_flags(tmp_path: Path) -> None:
    config = tmp_path / "producer.properties"
    config.write_text("bootstrap.servers=file:1\nacks=0\nlinger.ms=7\nclient.id=from-file\n")
    parser = build_parser()
    args = parser.parse_args(["produce", "t", "--command-config", str(config),
                              "--producer-property", "acks=1",
                              "--producer-property", "client.id=from-property"])
    assert client_settings(args, "producer", {"acks": None, "linger.ms": "9"}) == {
        "bootstrap.servers": "file:1", "acks": "1", "linger.ms": "9",
        "client.id": "from-property",
    }
    args = parser.parse_args(["produce", "t", "--producer.config", str(config),
                              "-b", "flag:2", "--request-timeout-ms", "5"])
    settings = client_settings(args, "producer")
    assert settings["bootstrap.servers"] == "flag:2" and settings["request.timeout.ms"] == "5"
    assert client_settings(parser.parse_args(["produce", "t"]), "producer") == {
        "bootstrap.servers": "127.0.0.1:9092"}


@pytest.mark.parametrize(("args", "message"), [
    (["consume", "t", "--consumer-property", "nonsense"],
     "--consumer-property expects KEY=VALUE"),
    (["consume", "t", "--consumer-property", "fetch.min.bytes=x"],
     "fetch.min.bytes must be an integer"),
    (["consume", "t", "--consumer-property", "max.poll.records=5"],
     "max.poll.records: a setting of the group consumer"),
    (["consume", "t", "--from-beginning", "--consumer-property", "auto.offset.reset=latest"],
     "--from-beginning contradicts auto.offset.reset=latest"),
    (["consume", "t", "--group", "a", "--consumer-property", "group.id=b"],
     "do not match"),
    (["consume", "t", "--group", "a", "--partition", "0"], "--group cannot be combined"),
    (["consume", "t", "--consumer-property", "enable.auto.commit=true"],
     "enable.auto.commit=true needs a group"),
    (["produce", "t", "--producer-property", "linger.ms=soon"], "linger.ms must be an integer"),
    (["produce", "t", "--command-property", "acks=2"], "acks must be one of"),
    (["get-offsets", "--time", "-7"], "malformed --time '-7'"),
    (["get-offsets", "--partitions", "0,x"], "--partitions expects comma-separated"),
    (["log-dirs", "--broker-list", "a"], "--broker-list expects comma-separated"),
    (["delete-records", "--topic", "t"], "--topic needs --offset"),
    (["delete-records", "--topic", "t", "--offset", "-2"], "offset must be ≥ 0, or -1"),
])
def test_bad_settings_are_one_line(cli: Callable[..., Result], args: list[str],
                                   message: str) -> None:
    result = cli(*args, "--bootstrap-server", "127.0.0.1:1")
    assert result.code == 1, result
    assert message in result.err
    assert result.err.count("\n") == 1 and "Traceback" not in result.err


def test_missing_config_file(cli: Callable[..., Result], tmp_path: Path) -> None:
    result = cli("cluster", "--command-config", str(tmp_path / "nope.properties"))
    assert result.code == 1
    assert result.err == (f"strom cluster: error: No such file or directory: "
                          f"{tmp_path / 'nope.properties'}\n")


def test_unknown_key_in_config_file(cli: Callable[..., Result], tmp_path: Path) -> None:
    config = tmp_path / "admin.properties"
    config.write_text("client.id=x\nlinger.ms=5\n")
    result = cli("get-offsets", "--command-config", str(config))
    assert result.code == 1 and "unknown admin property 'linger.ms'" in result.err


def test_produce_takes_the_producer_pipeline_properties(cli: Callable[..., Result],
                                                        broker: Any) -> None:
    """``partitioner`` places keys as librdkafka's does; serializer settings are overridden
    (lines are bytes), as Kafka's console producer overrides them."""
    topic = asyncio.run(make_topic(broker.bootstrap, 5))
    keys = [f"user-{i}" for i in range(20)]
    result = cli("produce", topic, "--bootstrap-server", broker.bootstrap, "--key-separator",
                 ":", "--producer-property", "partitioner=consistent",
                 "--producer-property", "max.block.ms=5000", "--producer-property",
                 "value.serializer=org.apache.kafka.common.serialization.StringSerializer",
                 stdin="".join(f"{key}:v\n" for key in keys))
    assert result.code == 0, result.err
    records = asyncio.run(read_all(broker.bootstrap, topic, 5))
    assert sorted((r.key or b"", r.partition) for r in records) == sorted(
        (key.encode(), zlib.crc32(key.encode()) % 5) for key in keys)


def _leaf_parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
                  ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every runnable sub-command's parser, with its words (``("topics", "create")``)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
        return
    for name, child in subs[0].choices.items():
        yield from _leaf_parsers(child, (*path, name))


#: Commands that do not talk to brokers (or, for pipeline, go through Spark's options).
_OFFLINE = {"broker", "dump-log", "pipeline"}


def test_every_broker_command_takes_command_config() -> None:
    """Kafka's --command-config on every command that connects to brokers; the producer and
    consumer tools also take Kafka's --producer.config / --consumer.config."""
    missing, checked = [], 0
    for words, parser in _leaf_parsers(build_parser()):
        if words[0] in _OFFLINE:
            continue
        checked += 1
        options = {o for a in parser._actions for o in a.option_strings}
        if "--command-config" not in options:
            missing.append(" ".join(words))
        if words in (("produce",), ("perf", "produce")):
            assert "--producer.config" in options, words
        if words in (("consume",), ("perf", "consume")):
            assert "--consumer.config" in options, words
    assert checked >= 30 and not missing, missing
