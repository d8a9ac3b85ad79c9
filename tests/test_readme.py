"""The README's "Using it" sequence, run line by line as written against a real broker.

The broker is started as the README starts it (``strom broker`` in a working directory, data
in ``./strom-data``) but on a free port, since 9092 may be taken on a shared machine; the
only change to the commands is a ``strom`` on PATH that adds ``--bootstrap-server`` for that
port to the commands that talk to a broker (``dump-log`` reads files and takes none).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
OFFLINE_COMMANDS = ("broker", "dump-log")


def using_it_commands() -> list[str]:
    """The indented command block right under the README's "## Using it" heading."""
    section = README.read_text("utf-8").split("\n## Using it\n", 1)[1]
    commands: list[str] = []
    for line in section.splitlines():
        if line.startswith("    "):
            commands.append(line[4:])
        elif commands:
            break
    return commands


@pytest.fixture
def readme_broker(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """(working directory, bootstrap) of ``strom broker`` started there."""
    proc = subprocess.Popen([sys.executable, "-m", "strom", "broker", "--listen", "127.0.0.1:0"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("strom broker listening on "), proc.communicate(timeout=10)
        assert "(data in strom-data)" in line
        yield tmp_path, line.split("listening on ")[1].split()[0]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def _strom_on_path(bin_dir: Path, bootstrap: str) -> None:
    bin_dir.mkdir()
    offline = " | ".join(OFFLINE_COMMANDS)
    script = bin_dir / "strom"
    script.write_text(
        "#!/bin/sh\n"
        f'case "$1" in {offline}) exec {shlex.quote(sys.executable)} -m strom "$@" ;; esac\n'
        f'exec {shlex.quote(sys.executable)} -m strom "$@" --bootstrap-server {bootstrap}\n')
    script.chmod(0o755)


def test_the_using_it_sequence_works_as_written(readme_broker: tuple[Path, str],
                                                tmp_path_factory: pytest.TempPathFactory
                                                ) -> None:
    workdir, bootstrap = readme_broker
    bin_dir = tmp_path_factory.mktemp("readme") / "bin"
    _strom_on_path(bin_dir, bootstrap)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    commands = using_it_commands()
    assert len(commands) >= 5 and all("strom " in c for c in commands), commands
    outputs: dict[str, str] = {}
    for command in commands:
        result = subprocess.run(["bash", "-c", command], cwd=workdir, env=env,
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, f"{command!r} failed: {result.stderr}"
        assert "Traceback" not in result.stderr
        outputs[command.split("#")[0].strip()] = result.stdout

    def output_of(prefix: str) -> str:
        [out] = [out for command, out in outputs.items() if command.startswith(prefix)]
        return out

    assert output_of("strom consume orders") == "k1\thello\nk2\tworld\n"
    described = output_of("strom groups describe my-consumers").splitlines()
    rows = [line.split()[:6] for line in described if line.startswith("my-consumers ")]
    assert ["my-consumers", "orders", "1", "0", "2", "2"] in rows  # committed 0, end 2, lag 2
    assert len(rows) == 8
    dumped = output_of("strom dump-log strom-data/orders-1")
    assert "Summary: 1 batches, 2 records" in dumped
