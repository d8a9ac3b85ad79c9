"""``strom cluster up|status|down``: real ZooKeeper and broker processes that outlive the
command, driven through the CLI as a user would, checked with confluent-kafka."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from strom.cli import detached
from strom.cli.local_cluster import BROKER_MARKER, ZOOKEEPER_MARKER
from strom.cli.zookeeper_server import zookeeper_available

pytestmark = pytest.mark.skipif(not zookeeper_available(),
                                reason="ZooKeeper (Debian package and java) not installed")


def strom(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom", *args], capture_output=True,
                          text=True, timeout=timeout)


def status_rows(data_dir: Path) -> list[list[str]]:
    result = strom("cluster", "status", "--data-dir", str(data_dir))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["ROLE", "ID", "PID", "ADDRESS", "ALIVE", "CONTROLLER"]
    return [line.split() for line in lines[1:]]


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    """The directory of a cluster; whatever the test leaves running is stopped after it."""
    yield tmp_path
    if (tmp_path / "cluster.json").exists():
        strom("cluster", "down", "--data-dir", str(tmp_path), "--timeout", "10")
    for pid_file in tmp_path.glob("*/*.pid"):
        pid = detached.read_pid(pid_file)
        if detached.alive(pid, BROKER_MARKER) or detached.alive(pid, ZOOKEEPER_MARKER):
            os.kill(pid, signal.SIGKILL)  # type: ignore[arg-type]


def test_up_status_down(cluster_dir: Path) -> None:
    started = time.monotonic()
    up = strom("cluster", "up", "--brokers", "3", "--data-dir", str(cluster_dir),
               "--set", "zookeeper.session.timeout.ms=2000")
    assert up.returncode == 0, up.stderr
    assert time.monotonic() - started < 60
    bootstrap = up.stdout.strip()
    assert len(bootstrap.split(",")) == 3 and all(
        a.startswith("127.0.0.1:") for a in bootstrap.split(","))
    assert "ZooKeeper (pid" in up.stderr and "broker 2 (pid" in up.stderr

    # the printed bootstrap works with confluent-kafka: a topic on all three brokers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert sorted(admin.list_topics(timeout=10).brokers) == [0, 1, 2]
    admin.create_topics([NewTopic("three-copies", 3, 3)])["three-copies"].result(15)
    described = strom("topics", "describe", "three-copies", "--bootstrap-server", bootstrap)
    assert described.returncode == 0, described.stderr
    lines = described.stdout.splitlines()
    assert "\tReplicationFactor: 3\t" in lines[0] and len(lines) == 4
    for line in lines[1:]:
        replicas = line.split("Replicas: ")[1].split("\t")[0]
        assert sorted(map(int, replicas.split(","))) == [0, 1, 2]

    rows = status_rows(cluster_dir)
    assert [(r[0], r[1], r[4]) for r in rows] == [
        ("zookeeper", "-", "yes"), ("broker", "0", "yes"), ("broker", "1", "yes"),
        ("broker", "2", "yes")]
    assert [r[3] for r in rows[1:]] == bootstrap.split(",")
    assert [r[5] for r in rows[1:]].count("yes") == 1  # exactly one controller
    pids = [int(r[2]) for r in rows]

    # the processes outlived `up`; kill -9 one broker, `up` again restarts just that one
    os.kill(pids[2], signal.SIGKILL)
    wait_for(lambda: status_rows(cluster_dir)[2][4] == "no", "broker 1 seen dead")
    again = strom("cluster", "up", "--data-dir", str(cluster_dir))
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == bootstrap  # same ids, same ports
    rows = status_rows(cluster_dir)
    assert [int(r[2]) for r in rows][:2] == pids[:2] and int(rows[2][2]) != pids[2]
    assert all(r[4] == "yes" for r in rows)
    assert json.loads((cluster_dir / "cluster.json").read_text())["settings"] == {
        "zookeeper.session.timeout.ms": "2000"}

    down = strom("cluster", "down", "--data-dir", str(cluster_dir))
    assert down.returncode == 0, down.stderr
    rows = status_rows(cluster_dir)
    assert all(r[2] == "-" and r[4] == "no" for r in rows)
    for pid in [int(r) for r in pids[:2]]:
        assert not detached.alive(pid, "")
    assert (cluster_dir / "broker-0" / "broker.log").read_text().strip().endswith(
        "strom broker stopped")  # SIGTERM: a clean shutdown


def test_usage_errors(cluster_dir: Path) -> None:
    result = strom("cluster", "status", "--data-dir", str(cluster_dir))
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"strom cluster: error: no cluster in {cluster_dir} (no cluster.json); start one with "
        f"strom cluster up --data-dir {cluster_dir}")
    result = strom("cluster", "up")
    assert result.returncode == 1
    assert result.stderr.strip() == "strom cluster: error: strom cluster up needs --data-dir DIR"
    result = strom("cluster", "up", "--data-dir", str(cluster_dir), "--set", "log.dayz=1")
    assert result.returncode == 1 and "Unknown broker configuration key 'log.dayz'" in \
        result.stderr
    assert not list(cluster_dir.glob("*/*.pid"))  # nothing was started
    (cluster_dir / "cluster.json").write_text(json.dumps(
        {"version": 1, "zookeeper": {"port": 1}, "brokers": {"0": {"port": 2},
                                                              "1": {"port": 3}}}))
    result = strom("cluster", "up", "--data-dir", str(cluster_dir), "--brokers", "1")
    assert result.returncode == 1
    assert "holds a cluster of 2 brokers" in result.stderr
    (cluster_dir / "cluster.json").write_text("{")
    result = strom("cluster", "down", "--data-dir", str(cluster_dir))
    assert result.returncode == 1 and "is not a strom cluster state file" in result.stderr
    assert "Traceback" not in result.stderr


def wait_for(condition: object, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
