"""Kafka's plain-text checkpoint files, read and written atomically.

Format (UTF-8 text, ``\\n`` line ends)::

    0                       version line
    <n>                     number of entries
    <entry>                 n lines, fields separated by one space

Offset checkpoints (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``replication-offset-checkpoint``, ``cleaner-offset-checkpoint``) have entries
``<topic> <partition> <offset>``; the ``leader-epoch-checkpoint`` of a partition has entries
``<epoch> <start offset>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from strom.common.types import TopicPartition
from strom.storage.files import CorruptFileError, atomic_write

CHECKPOINT_VERSION = 0
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"


def write_checkpoint(path: Path, entries: Iterable[Iterable[object]], *, sync: bool = True) -> None:
    """Write ``entries`` (each a sequence of fields) in the checkpoint format, atomically."""
    lines = [" ".join(str(field) for field in entry) for entry in entries]
    text = f"{CHECKPOINT_VERSION}\n{len(lines)}\n" + "".join(line + "\n" for line in lines)
    atomic_write(path, text.encode(), sync=sync)


def read_checkpoint(path: Path, fields: int) -> list[list[str]]:
    """The entries of a checkpoint file (each ``fields`` strings); [] if the file is absent.

    Raises CorruptFileError on a bad version, count or line.
    """
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    except UnicodeDecodeError:
        raise CorruptFileError(f"{path}: not a text checkpoint") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise CorruptFileError(f"{path}: missing version or count line")
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CorruptFileError(f"{path}: unsupported checkpoint version {lines[0]!r}")
    try:
        count = int(lines[1])
    except ValueError:
        raise CorruptFileError(f"{path}: bad entry count {lines[1]!r}") from None
    body = lines[2:]
    if count != len(body):
        raise CorruptFileError(f"{path}: expected {count} entries, found {len(body)}")
    entries: list[list[str]] = []
    for line in body:
        parts = line.split(" ")
        if len(parts) != fields:
            raise CorruptFileError(f"{path}: malformed line {line!r}")
        entries.append(parts)
    return entries


def write_offsets(path: Path, offsets: Mapping[TopicPartition, int]) -> None:
    """Write a ``topic partition offset`` checkpoint (sorted, for stable diffs)."""
    write_checkpoint(path, ((tp.topic, tp.partition, off) for tp, off in sorted(offsets.items())))


def read_offsets(path: Path) -> dict[TopicPartition, int]:
    """Read a ``topic partition offset`` checkpoint; {} if absent, CorruptFileError if bad."""
    result: dict[TopicPartition, int] = {}
    for topic, partition, offset in read_checkpoint(path, 3):
        try:
            result[TopicPartition(topic, int(partition))] = int(offset)
        except ValueError:
            raise CorruptFileError(f"{path}: bad entry {topic} {partition} {offset}") from None
    return result
