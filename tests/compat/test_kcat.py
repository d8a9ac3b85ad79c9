"""kcat (librdkafka's command-line client) against a real strom broker."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
import uuid
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


def kcat_librdkafka() -> tuple[int, ...]:
    """The librdkafka version kcat is built on (``kcat -V``: "... librdkafka 2.0.2 ...")."""
    found = re.search(r"librdkafka (\d+)\.(\d+)\.(\d+)", kcat("-V"))
    assert found, "kcat -V names no librdkafka version"
    return tuple(int(part) for part in found.groups())


@pytest.mark.parametrize(("codec", "attribute"), [
    ("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4)])
def test_each_codec_is_stored_compressed(broker: EmbeddedBroker, new_topic: Callable[..., str],
                                         codec: str, attribute: int) -> None:
    # librdkafka before 2.11.1 (Debian's kcat is built on 2.0.2) enables gzip / snappy / lz4
    # only when the broker lists Produce v0, and otherwise stores every batch uncompressed
    # without a word; Kafka 4.1+ lists it for that reason (KAFKA-18659), and so does strom.
    topic = new_topic()
    lines = "".join(f"value {i} " + "x" * 100 + "\n" for i in range(50))
    kcat("-b", broker.bootstrap, "-P", "-t", topic, "-p", "0", "-z", codec, stdin=lines)
    segment = broker.data_dir / f"{topic}-0" / f"{0:020d}.log"
    stored = segment.read_bytes()
    # A batch: base offset (8), length (4), leader epoch (4), magic (1), crc (4), attributes.
    assert stored[16] == 2 and struct.unpack(">h", stored[21:23])[0] & 0x7 == attribute, (
        f"kcat (librdkafka {kcat_librdkafka()}) stored its {codec} batch as attributes "
        f"{struct.unpack('>h', stored[21:23])[0]}")
    out = kcat("-b", broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q")
    assert out == lines


def test_auto_create_on_produce(broker: EmbeddedBroker) -> None:
    kcat("-b", broker.bootstrap, "-P", "-t", "kcat-auto", stdin="one\ntwo\n")
    out = kcat("-b", broker.bootstrap, "-C", "-t", "kcat-auto", "-o", "beginning", "-e", "-q")
    assert out.splitlines() == ["one", "two"]


def strom_cli(broker: EmbeddedBroker, *args: str, stdin: str | None = None) -> None:
    result = subprocess.run([sys.executable, "-m", "strom", *args, "--bootstrap-server",
                             broker.bootstrap], input=stdin, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(("reset", "out", "status"), [
    (None, "", 0),  # kcat's default, latest: reset to the end, nothing to print, exit
    ("earliest", "x\n", 0),
    ("error", "", 1),  # the error is reported: "Broker: Offset out of range"
])
def test_consume_from_an_offset_past_the_end_exits(
    broker: EmbeddedBroker, reset: str | None, out: str, status: int
) -> None:
    # The reproduction: an OFFSET_OUT_OF_RANGE partition once carried null records,
    # librdkafka rejected the response ("invalid MessageSetSize -1") and kcat never exited.
    topic = f"kcat-range-{reset}-{uuid.uuid4().hex[:8]}"
    strom_cli(broker, "topics", "create", topic)
    strom_cli(broker, "produce", topic, stdin="x\n")
    extra = ["-X", f"auto.offset.reset={reset}"] if reset else []
    result = subprocess.run(["kcat", "-b", broker.bootstrap, "-C", "-t", topic, "-o", "100",
                             "-e", *extra], capture_output=True, text=True, timeout=30)
    assert (result.returncode, result.stdout) == (status, out), result.stderr
    if reset == "error":
        assert "Offset out of range" in result.stderr
    else:
        assert "offset reset" in result.stderr and "MessageSetSize" not in result.stderr
