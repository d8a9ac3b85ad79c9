"""Fixtures for CLI tests: a fake broker on a background loop, and a CLI runner."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from strom.cli.main import main
from strom.client.sync import LoopThread
from tests.client.fake_broker import FakeBroker


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def fake_broker() -> Iterator[FakeBroker]:
    loop = LoopThread("fake-broker")
    broker = loop.run(FakeBroker().start())
    try:
        yield broker
    finally:
        loop.run(broker.stop())
        loop.stop()


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch,
        capsysbinary: pytest.CaptureFixture[bytes]) -> Callable[..., Result]:
    """Run ``strom ARGS`` in-process with ``stdin`` text; returns exit code, stdout, stderr."""

    def run(*args: str, stdin: str = "") -> Result:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse usage errors
            code = int(exc.code or 0)
        captured = capsysbinary.readouterr()
        return Result(code, captured.out.decode(), captured.err.decode())

    return run
