"""``partition.metadata``: the id of the topic a partition directory belongs to (Kafka's
``PartitionMetadataFile``, KIP-516).

A topic deleted and created again under the same name has the same directory name
(``<topic>-<partition>``) but a new topic id; the id in this file is what tells the
generations apart, so a log of a deleted topic is never taken for the new topic's.

On-disk format (Kafka's, text; rewritten atomically with an fsync, or written once by a new
log as below)::

    version: 0
    topic_id: <Kafka's Uuid text: URL-safe base64 of the 16 bytes, no padding>

Kafka writes no trailing newline; one is accepted on read, as is any whitespace after the
colon.

A brand-new log writes its file without an fsync (:func:`write_new`) and makes it durable
(:func:`sync`) before its first data is written, as Kafka's ``maybeFlushMetadataFile`` does
(creating a partition then costs no fsync of its own). A crash before that can leave the
file empty — a write that never became durable, with no data depending on it — which is
read as no file. A directory without the file belongs to a log written before topic ids were
stored (an earlier strom): its owner adopts it once by writing the id of the topic the
metadata names (as Kafka does with logs from before KIP-516).
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

from strom.common.types import kafka_uuid, parse_kafka_uuid
from strom.storage.file_pool import default_pool
from strom.storage.files import CorruptFileError, atomic_write, fsync_dir, write_fully

PARTITION_METADATA_FILE = "partition.metadata"
VERSION = 0
_FIELD = re.compile(r"^([a-z_]+):\s*(\S+)\s*$")


def encode(topic_id: uuid.UUID) -> bytes:
    """The file's contents for ``topic_id``."""
    return f"version: {VERSION}\ntopic_id: {kafka_uuid(topic_id)}".encode()


def decode(data: bytes) -> uuid.UUID:
    """The topic id in a ``partition.metadata`` file; :class:`CorruptFileError` when the
    text is not the format above (an unknown version included)."""
    try:
        lines = data.decode("utf-8").strip().splitlines()
    except UnicodeDecodeError as exc:
        raise CorruptFileError(f"{PARTITION_METADATA_FILE} is not text") from exc
    fields = {}
    for line in lines:
        match = _FIELD.match(line.strip())
        if match is None:
            raise CorruptFileError(f"malformed line in {PARTITION_METADATA_FILE}: {line!r}")
        fields[match.group(1)] = match.group(2)
    if fields.get("version") != str(VERSION):
        raise CorruptFileError(f"{PARTITION_METADATA_FILE}: unknown version "
                               f"{fields.get('version')!r} (expected {VERSION})")
    text = fields.get("topic_id")
    if text is None:
        raise CorruptFileError(f"{PARTITION_METADATA_FILE} names no topic_id")
    try:
        return parse_kafka_uuid(text)
    except ValueError as exc:
        raise CorruptFileError(f"{PARTITION_METADATA_FILE}: bad topic_id {text!r}") from exc


def read_topic_id(directory: Path) -> uuid.UUID | None:
    """The topic id stored in ``directory`` (None: no file, a log from before topic ids);
    :class:`CorruptFileError` when the file is unreadable as the format above."""
    try:
        data = (directory / PARTITION_METADATA_FILE).read_bytes()
    except FileNotFoundError:
        return None
    if not data:
        return None  # written by write_new, cut by a crash before sync: no data relies on it
    return decode(data)


def write_topic_id(directory: Path, topic_id: uuid.UUID) -> None:
    """Store ``topic_id`` in ``directory`` (atomically: the old file or the new one, never a
    torn one, durable on return)."""
    atomic_write(directory / PARTITION_METADATA_FILE, encode(topic_id))


def write_new(directory: Path, topic_id: uuid.UUID) -> None:
    """Store ``topic_id`` in a new partition directory that holds no file of this name, without
    an fsync: :func:`sync` makes it durable (FileExistsError if the file exists)."""
    fd = default_pool().open_fd(directory / PARTITION_METADATA_FILE,
                                os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        write_fully(fd, encode(topic_id), 0)
    finally:
        os.close(fd)


def sync(directory: Path) -> None:
    """fsync the file :func:`write_new` wrote, then the directory holding its entry."""
    fd = default_pool().open_fd(directory / PARTITION_METADATA_FILE, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(directory)
