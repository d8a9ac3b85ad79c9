"""The "## The producer" script of src/strom/client/README.md runs as written, against strom
and Tansu (only the bootstrap address and the topic name are replaced)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from tests.client.producer_helpers import make_topic, read_all

README = Path(__file__).resolve().parents[2] / "src" / "strom" / "client" / "README.md"


def producer_script() -> str:
    """The indented block of the README's "## The producer" section."""
    section = README.read_text("utf-8").split("\n## The producer\n", 1)[1]
    lines: list[str] = []
    for line in section.splitlines():
        if line.startswith("    ") or (lines and not line.strip()):
            lines.append(line[4:])
        elif lines:
            break
    return "\n".join(lines)


def test_the_producer_example_runs(any_broker: str) -> None:
    topic = asyncio.run(make_topic(any_broker, 3))
    script = producer_script().replace("127.0.0.1:9092", any_broker).replace('"orders"',
                                                                              repr(topic))
    assert "on_delivery" in script and "send_and_wait" in script
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("delivered") == 1 and "failed" not in result.stdout
    records = asyncio.run(read_all(any_broker, topic, 3))
    assert sorted(r.value or b"" for r in records) == [
        b"plain text", b'{"id":1}', b'{"id":2}', b'{"id":3}']
