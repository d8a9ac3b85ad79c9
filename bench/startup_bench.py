"""A single broker's start-up on a data directory with many partition directories.

    python bench/startup_bench.py [--partitions 10000,100000] [--per-topic 100]
                                  [--unclean] [--repeats 1] [--also-source DIR] [--out FILE]

For every size it generates the data directory once per source tree
(:func:`strom.testing.data_dir.make_data_dir`, run under that tree so the files are the ones
its broker writes: ``--per-topic`` partitions per topic, all empty, clean shutdown unless
``--unclean``), then starts ``strom broker`` on it and records, from the start of the process:

* ``listen`` — the port accepts a connection;
* ``ApiVersions`` — the first ApiVersions request (v0, raw socket) is answered;
* ``Metadata`` — an AdminClient's Metadata lists every topic;
* ``produce`` — an acks=all record to the last partition is acknowledged;
* ``all opened`` — the broker logs that every pending partition is open (strom's INFO line
  ``opened N partitions``; "n/a" for a tree that opens every log before it listens);
* ``RSS`` — the broker's resident memory once all are opened (or after the produce);
* ``stop`` — seconds from SIGTERM (sent then) to the exit;
* ``stop busy`` — a second start on the same directory, SIGTERM 3 s after the process
  started (loading), seconds to the exit; "killed" when the signal's default action ended
  the process (no handler installed yet, nothing closed cleanly).

Timeouts (600 s per step) are reported as ``>600``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from brokers import PAGE, free_port  # type: ignore[import-not-found]

HERE = Path(__file__).resolve().parent
GENERATOR = HERE.parent / "src" / "strom" / "testing" / "data_dir.py"
STEP_TIMEOUT = 600.0


def generate(path: Path, partitions: int, per_topic: int, clean: bool, source: str | None
             ) -> float:
    """Make the data directory under ``source``'s strom; returns the seconds it took."""
    code = (f"import runpy, pathlib; runpy.run_path({str(GENERATOR)!r})['make_data_dir']("
            f"pathlib.Path({str(path)!r}), topics={partitions // per_topic}, "
            f"partitions={per_topic}, clean={clean})")
    began = time.monotonic()
    subprocess.run([sys.executable, "-c", code], check=True, env=_env(source))
    return time.monotonic() - began


def _env(source: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = os.path.abspath(source)
    return env


def api_versions_answered(port: int) -> bool:
    request = struct.pack(">hhih", 18, 0, 1, 5) + b"bench"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(struct.pack(">i", len(request)) + request)
            return len(s.recv(8)) >= 8
    except OSError:
        return False


def accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass
class Start:
    figures: dict[str, float | None] = field(default_factory=dict)


def _wait(condition: object, began: float, process: subprocess.Popen[bytes]) -> float | None:
    while time.monotonic() - began < STEP_TIMEOUT:
        if condition():  # type: ignore[operator]
            return time.monotonic() - began
        if process.poll() is not None:
            return None
        time.sleep(0.05)
    return None


def start_broker(data_dir: Path, source: str | None, log_path: Path
                 ) -> tuple[subprocess.Popen[bytes], int, float]:
    port = free_port()
    with open(log_path, "wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "strom", "--log-level", "INFO", "broker", "--listen",
             f"127.0.0.1:{port}", "--data-dir", str(data_dir)],
            stdout=subprocess.DEVNULL, stderr=err, env=_env(source))
    return process, port, time.monotonic()


def stop(process: subprocess.Popen[bytes]) -> float | None:
    """Seconds from SIGTERM to the exit; -1 when the signal killed the process (no handler
    yet: nothing was closed cleanly)."""
    began = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STEP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return None
    if process.returncode == -signal.SIGTERM:
        return -1.0
    return time.monotonic() - began


def opens_lazily(source: str | None) -> bool:
    """Whether the tree's broker opens its logs after it listens (and logs when done)."""
    root = Path(source) if source is not None else HERE.parent / "src"
    module = root / "strom" / "replication" / "replica_manager.py"
    return module.exists() and "opened %d partitions" in module.read_text()


def _client_steps(port: int, began: float, process: subprocess.Popen[bytes],
                  partitions: int, per_topic: int, figures: dict[str, float | None]) -> None:
    """Metadata and produce; the clients are gone when this returns (no reconnecting once
    the broker stops)."""
    quiet: dict[str, str | int | float | bool] = {
        "bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0}
    admin = AdminClient(quiet)
    topics = partitions // per_topic
    figures["Metadata"] = _wait(
        lambda: len(admin.list_topics(timeout=STEP_TIMEOUT).topics) >= topics,
        began, process)
    producer = Producer({**quiet, "acks": "all",
                         "message.timeout.ms": int(STEP_TIMEOUT * 1000)})
    producer.produce(f"t{topics - 1:05d}", b"x", partition=per_topic - 1)
    figures["produce"] = (time.monotonic() - began
                          if producer.flush(STEP_TIMEOUT) == 0 else None)


def one_start(data_dir: Path, source: str | None, partitions: int, per_topic: int) -> Start:
    log_path = data_dir.parent / "broker.log"
    process, port, began = start_broker(data_dir, source, log_path)
    figures: dict[str, float | None] = {}
    try:
        figures["listen"] = _wait(lambda: accepts(port), began, process)
        figures["ApiVersions"] = _wait(lambda: api_versions_answered(port), began, process)
        _client_steps(port, began, process, partitions, per_topic, figures)
        figures["all opened"] = (
            _wait(lambda: b"opened " in log_path.read_bytes(), began, process)
            if opens_lazily(source) else float("nan"))
        figures["RSS MB"] = int(Path(f"/proc/{process.pid}/statm").read_text().split()[1]
                                ) * PAGE / 1e6
    finally:
        figures["stop"] = stop(process)
    process, port, began = start_broker(data_dir, source, log_path)
    time.sleep(max(0.0, began + 3.0 - time.monotonic()))
    figures["stop busy"] = stop(process)
    return Start(figures)


COLUMNS = ["listen", "ApiVersions", "Metadata", "produce", "all opened", "RSS MB", "stop",
           "stop busy"]


def cell(value: float | None) -> str:
    if value is None:
        return f">{STEP_TIMEOUT:.0f}"
    if value != value:  # nan: not applicable
        return "n/a"
    if value < 0:
        return "killed"
    return f"{value:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="10000,100000")
    parser.add_argument("--per-topic", type=int, default=100)
    parser.add_argument("--unclean", action="store_true")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--also-source", action="append", default=[], metavar="DIR")
    parser.add_argument("--out")
    args = parser.parse_args()
    rows = ["| partitions | tree | generated s | " + " | ".join(
        c if c == "RSS MB" else f"{c} s" for c in COLUMNS) + " |",
        "|---|---|---|" + "---|" * len(COLUMNS)]
    for size in (int(s) for s in args.partitions.split(",")):
        for label, source in [("this", None)] + [(s, s) for s in args.also_source]:
            root = Path(tempfile.mkdtemp(prefix="strom-startup-"))
            try:
                generated = generate(root / "data", size, args.per_topic,
                                     not args.unclean, source)
                for _ in range(args.repeats):
                    start = one_start(root / "data", source, size, args.per_topic)
                    line = (f"| {size:,} | {label} | {generated:.1f} | "
                            + " | ".join(cell(start.figures.get(c)) for c in COLUMNS) + " |")
                    print(line, file=sys.stderr, flush=True)
                    rows.append(line)
            finally:
                shutil.rmtree(root, ignore_errors=True)
    text = "\n".join(rows)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
