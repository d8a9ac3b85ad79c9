"""`strom broker`: flags, config file, clear errors, clean stop on SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

from confluent_kafka.admin import AdminClient

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


def test_data_dir_of_another_node_is_refused(tmp_path: Path) -> None:
    with EmbeddedBroker(data_dir=tmp_path):
        pass
    props = (tmp_path / "meta.properties").read_text()
    assert "node.id=0" in props and "cluster.id=" in props
    result = strom("broker", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path),
                   "--set", "node.id=3")
    assert result.returncode != 0 and "belongs to node.id 0" in result.stderr


def test_unreadable_metadata_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "strom-metadata.json").write_text("{not json")
    result = strom("broker", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path))
    assert result.returncode != 0 and "cannot read the metadata" in result.stderr
    assert "Traceback" not in result.stderr
