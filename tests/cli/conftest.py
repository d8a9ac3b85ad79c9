"""Fixtures for CLI tests: a fake broker on a background loop, and a CLI runner."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from strom.cli import main as cli_main
from strom.cli.main import main
from strom.client.sync import LoopThread
from strom.protocol.versions import SUPPORTED
from tests.client.fake_broker import GROUP_API_VERSIONS, FakeBroker


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
def group_broker() -> Iterator[FakeBroker]:
    """A fake broker that also serves the consumer-group admin APIs."""
    loop = LoopThread("fake-broker")
    broker = loop.run(FakeBroker({**SUPPORTED, **GROUP_API_VERSIONS}).start())
    try:
        yield broker
    finally:
        loop.run(broker.stop())
        loop.stop()


@pytest.fixture
def groups_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make sure ``strom groups`` is registered, whether or not main.py lists it yet."""
    from strom.cli import groups

    original = cli_main._optional_commands

    def with_groups() -> list[object]:
        modules = original()
        return modules if groups in modules else [*modules, groups]

    monkeypatch.setattr(cli_main, "_optional_commands", with_groups)


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
