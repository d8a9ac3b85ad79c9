"""`strom broker`: flags, config file, clear errors, clean stop on SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing import EmbeddedBroker


def strom(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_config_file_and_set_flags(tmp_path: Path) -> None:
    conf = tmp_path / "broker.properties"
    conf.write_text("# defaults for this test\nnum.partitions=5\nlog.retention.hours: 3\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "strom", "broker", "--listen", "127.0.0.1:0", "--data-dir",
         str(tmp_path / "data"), "--config", str(conf), "--set", "num.partitions=4"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("strom broker listening on 127.0.0.1:")
        bootstrap = line.split("listening on ")[1].split()[0]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        md = admin.list_topics("auto", timeout=10)  # auto-created with num.partitions
        assert len(md.topics["auto"].partitions) == 4  # --set beats the file
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (tmp_path / "data" / "auto-0").is_dir()


def test_bad_config_is_a_clear_error(tmp_path: Path) -> None:
    result = strom("broker", "--data-dir", str(tmp_path), "--set", "log.retention.dayz=1")
    assert result.returncode != 0
    assert "Unknown broker configuration key 'log.retention.dayz'" in result.stderr
    assert "Traceback" not in result.stderr
    result = strom("broker", "--data-dir", str(tmp_path), "--set", "num.partitions=many")
    assert result.returncode != 0 and "num.partitions" in result.stderr
    assert "Traceback" not in result.stderr


def test_port_in_use_and_data_dir_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = strom("broker", "--listen", f"127.0.0.1:{port}", "--data-dir", str(tmp_path))
    assert result.returncode != 0 and "cannot listen on" in result.stderr
    assert "Traceback" not in result.stderr
    with EmbeddedBroker(data_dir=tmp_path / "shared"):
        result = strom("broker", "--listen", "127.0.0.1:0", "--data-dir",
                       str(tmp_path / "shared"))
        assert result.returncode != 0 and "in use by another broker" in result.stderr


def test_help_config_lists_every_key() -> None:
    result = strom("broker", "--help-config")
    assert result.returncode == 0
    assert "log.retention.ms" in result.stdout and "socket.request.max.bytes" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 100  # docs are wrapped
    auto_create = " ".join(result.stdout.split("auto.create.topics.enable  ")[1]
                           .split("\n", 1)[1].split("\ndelete.topic.enable")[0].split())
    assert "when a Metadata request names it and allows auto-creation" in auto_create
    assert "Produce, Fetch and other requests for a missing topic create nothing" in auto_create


def test_data_dir_of_another_node_is_refused(tmp_path: Path) -> None:
    with EmbeddedBroker(data_dir=tmp_path):
        pass
    props = (tmp_path / "meta.properties").read_text()
    assert "node.id=0" in props and "cluster.id=" in props
    result = strom("broker", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path),
                   "--set", "node.id=3")
    assert result.returncode != 0 and "belongs to node.id 0" in result.stderr


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """A failed start: non-zero exit, and stderr is one ``strom broker: error:`` line."""
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("strom broker: error: ")
    return lines[0].removeprefix("strom broker: error: ")


def test_unreadable_metadata_without_a_previous_copy_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "strom-metadata.json").write_text("{not json")
    message = one_error_line(strom("broker", "--listen", "127.0.0.1:0", "--data-dir",
                                   str(tmp_path)))
    assert message.startswith(f"cannot read the metadata in {tmp_path}: "
                              f"{tmp_path / 'strom-metadata.json'} is not valid JSON")
    assert message.endswith("and there is no previous copy (strom-metadata.json.prev) to "
                            "recover from. Restore it from a backup")


def test_listen_port_out_of_range(tmp_path: Path) -> None:
    data = tmp_path / "data"
    message = one_error_line(strom("broker", "--listen", "127.0.0.1:99999", "--data-dir",
                                   str(data)))
    assert message == ("listener 'PLAINTEXT://127.0.0.1:99999': port 99999 is out of range "
                       "(0-65535; 0 picks a free port)")
    assert not data.exists()  # checked before the data directory is touched


def test_data_dir_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory\n")
    message = one_error_line(strom("broker", "--listen", "127.0.0.1:0", "--data-dir",
                                   str(tmp_path / "file")))
    assert message == (f"the data directory {tmp_path / 'file'} (log.dirs / --data-dir) is a "
                       "file, not a directory")
    message = one_error_line(strom("broker", "--listen", "127.0.0.1:0", "--data-dir",
                                   str(tmp_path / "file" / "data")))
    assert message == f"cannot create the data directory {tmp_path / 'file' / 'data'}: " \
                      "Not a directory"


def test_a_failed_start_leaves_no_initialised_data_dir_behind(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with EmbeddedBroker(data_dir=tmp_path / "used"):
        pass
    used = tmp_path / "used"
    used_before = sorted(p.name for p in used.iterdir())
    metadata_before = (used / "strom-metadata.json").read_text()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for data in (tmp_path / "new" / "nested", empty, used):
            message = one_error_line(strom("broker", "--listen", f"127.0.0.1:{port}",
                                           "--data-dir", str(data)))
            assert message == f"cannot listen on 127.0.0.1:{port}: Address already in use"
    assert not (tmp_path / "new").exists()  # created by the failed start: removed
    assert list(empty.iterdir()) == []  # existed empty: emptied again
    assert sorted(p.name for p in used.iterdir()) == used_before  # kept
    assert (used / "strom-metadata.json").read_text() == metadata_before


@pytest.mark.parametrize(("content", "state"), [
    ("", "empty"),
    ("version=1\nnode.id=0\n", "incomplete (no cluster.id)"),
    ("#strom\nversion=1\n", "incomplete (no cluster.id and no node.id)"),
])
def test_empty_or_incomplete_meta_properties(tmp_path: Path, content: str, state: str) -> None:
    (tmp_path / "meta.properties").write_text(content)
    message = one_error_line(strom("broker", "--listen", "127.0.0.1:0", "--data-dir",
                                   str(tmp_path)))
    assert message == (
        f"{tmp_path / 'meta.properties'} is {state}. It records which cluster and node this "
        "data directory belongs to; if the directory is this broker's (node.id 0), delete the "
        "file and it is written again at the next start")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", "meta.properties"]


def test_truncated_metadata_is_recovered_from_the_previous_copy(tmp_path: Path) -> None:
    """The last write before the damage created the topic: its records survive too."""
    with EmbeddedBroker(data_dir=tmp_path) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("kept", 2, 1)])["kept"].result(10)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        for i in range(5):
            producer.produce("kept", f"v{i}".encode(), partition=1)
        assert producer.flush(10) == 0
    metadata = tmp_path / "strom-metadata.json"
    metadata.write_bytes(metadata.read_bytes()[:40])
    proc = subprocess.Popen(
        [sys.executable, "-m", "strom", "broker", "--listen", "127.0.0.1:0", "--data-dir",
         str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("strom broker listening on "), proc.communicate(timeout=10)
        bootstrap = line.split("listening on ")[1].split()[0]
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g",
                             "auto.offset.reset": "earliest"})
        consumer.assign([TopicPartition("kept", 1, 0)])
        values = [m.value() for m in consumer.consume(5, timeout=10)]
        consumer.close()
        assert values == [f"v{i}".encode() for i in range(5)]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.stderr is not None
    warnings = proc.stderr.read()
    assert f"WARNING strom.metadata.local: {metadata} is not valid JSON" in warnings
    assert "recovered the metadata from the previous copy" in warnings
    assert "topic kept has logs on disk but not in the recovered metadata" in warnings
    assert "Traceback" not in warnings


def _start(args: list[str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "strom", "broker", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("strom broker listening on "):
        proc.kill()
        raise AssertionError(proc.communicate(timeout=10))
    return proc, line.split("listening on ")[1].split()[0]


def test_broker_id_and_zookeeper_flags_and_kafka_names_in_the_file(
        tmp_path: Path, zookeeper_connect: str) -> None:
    """Two brokers of one cluster: one from flags, one from a file with Kafka's names; both
    registered in ZooKeeper under their ids, and the flag wins over the file."""
    conf = tmp_path / "server.properties"
    conf.write_text(f"broker.id=7\nzookeeper.connect={zookeeper_connect}\n"
                    "zookeeper.session.timeout.ms=2000\n")
    first, bootstrap = _start(["--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "a"),
                               "--broker-id", "3", "--zookeeper", zookeeper_connect,
                               "--set", "zookeeper.session.timeout.ms=2000"])
    procs = [first]
    try:
        second, _ = _start(["--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "b"),
                            "--config", str(conf), "--set", "node.id=7"])
        procs.append(second)
        third, _ = _start(["--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "c"),
                           "--config", str(conf), "--broker-id", "9"])
        procs.append(third)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        deadline = time.monotonic() + 15
        while sorted(admin.list_topics(timeout=10).brokers) != [3, 7, 9]:
            assert time.monotonic() < deadline, admin.list_topics(timeout=10).brokers
            time.sleep(0.2)
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()


@pytest.mark.parametrize("args, message", [
    (["--set", "broker.id=1", "--set", "node.id=2"],
     "broker.id (1) and node.id (2) must be equal when both are set"),
    (["--zookeeper", "zk1"], "'zk1' is not host:port"),
    (["--broker-id", "-1"], "node.id"),
])
def test_broker_id_and_zookeeper_errors_are_clear(
        tmp_path: Path, args: list[str], message: str) -> None:
    result = strom("broker", "--data-dir", str(tmp_path), *args)
    assert result.returncode != 0 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_broker_id_flag_must_be_a_number(tmp_path: Path) -> None:
    result = strom("broker", "--data-dir", str(tmp_path), "--broker-id", "one")
    assert result.returncode == 2 and "--broker-id: invalid int value: 'one'" in result.stderr


def test_a_started_broker_freezes_its_heap_and_collects_less_often(tmp_path: Path) -> None:
    """Once `strom broker` listens, what its start made is out of the cycle collector's
    reach and the collector runs with the broker's thresholds (docs/benchmarks.md)."""
    import asyncio
    import gc
    import os

    from strom.cli import broker_cmd
    from strom.common.config import BrokerConfig

    config = BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0",
                           "log.dirs": str(tmp_path / "data")})
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    seen: dict[str, object] = {}

    async def run() -> int:
        serving = asyncio.create_task(broker_cmd._serve(config))
        for _ in range(1000):
            await asyncio.sleep(0.01)
            if gc.get_freeze_count() or serving.done():
                break
        seen.update(thresholds=gc.get_threshold(), frozen=gc.get_freeze_count())
        os.kill(os.getpid(), signal.SIGTERM)  # its handler stops it cleanly
        return await serving

    try:
        assert asyncio.run(run()) == 0
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
    assert seen["thresholds"] == broker_cmd.GC_THRESHOLDS != before
    assert isinstance(seen["frozen"], int) and seen["frozen"] > 10_000
