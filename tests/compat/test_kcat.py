"""kcat (librdkafka's command-line client) against a real strom broker."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable

import pytest

from strom.testing import EmbeddedBroker

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None,
                                reason="kcat is not installed (apt-get install kcat)")


def kcat(*args: str, stdin: str | None = None) -> str:
    result = subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_metadata_produce_consume(broker: EmbeddedBroker, new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=2)
    listing = kcat("-b", broker.bootstrap, "-L", "-t", topic)
    assert f'topic "{topic}" with 2 partitions' in listing
    lines = "".join(f"k{i}:value {i}\n" for i in range(300))
    kcat("-b", broker.bootstrap, "-P", "-t", topic, "-K:", "-z", "lz4", stdin=lines)
    out = kcat("-b", broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
               "-f", "%k=%s@%p:%o\n")
    rows = out.splitlines()
    assert len(rows) == 300
    assert {r.split("@")[0] for r in rows} == {f"k{i}=value {i}" for i in range(300)}


def test_auto_create_on_produce(broker: EmbeddedBroker) -> None:
    kcat("-b", broker.bootstrap, "-P", "-t", "kcat-auto", stdin="one\ntwo\n")
    out = kcat("-b", broker.bootstrap, "-C", "-t", "kcat-auto", "-o", "beginning", "-e", "-q")
    assert out.splitlines() == ["one", "two"]
