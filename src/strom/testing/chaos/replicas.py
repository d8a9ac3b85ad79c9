"""Each replica's copy of a partition, read straight from a broker's data directory with
strom's own offline reader (:mod:`strom.storage.dump`, the code behind ``strom dump-log``),
so replicas can be compared offset by offset after the brokers stopped.

Layout read (Kafka's): ``<data-dir>/<topic>-<partition>/<20-digit base offset>.log`` segments
and ``partition.metadata`` (the topic id); ``<data-dir>/replication-offset-checkpoint`` and
``log-start-offset-checkpoint`` (``topic partition offset`` lines). Only the prefix of whole
batches with good CRCs is read from each segment, as crash recovery would keep; control
batches (transaction markers) are skipped and values decoded as UTF-8 (``errors="replace"``);
each batch's leader epoch is kept as runs (:attr:`ReplicaLog.epochs`).
Read only after the broker stopped (or on a copy): a live broker may be writing — or, as
:mod:`strom.testing.chaos.generations` does, poll until the copies agree.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from strom.common.types import TopicPartition, kafka_uuid
from strom.protocol.records.reader import decode_batches
from strom.storage.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    read_offsets,
)
from strom.storage.dump import dump_segment
from strom.storage.files import LOG_SUFFIX, CorruptFileError, read_fully
from strom.storage.partition_metadata import read_topic_id
from strom.testing.chaos.model import ReadRecord, ReplicaLog


def partition_dir(data_dir: str | Path, topic: str, partition: int) -> Path:
    return Path(data_dir) / f"{topic}-{partition}"


def segment_files(directory: Path) -> list[Path]:
    """The ``.log`` segments of a partition directory, in base-offset order."""
    return sorted(p for p in directory.glob(f"*{LOG_SUFFIX}") if p.stem.isdigit())


def read_replica(broker: int, data_dir: str | Path, topic: str, partition: int) -> ReplicaLog:
    """``broker``'s copy of ``topic``-``partition`` under ``data_dir`` (an empty log when the
    directory does not exist)."""
    directory = partition_dir(data_dir, topic, partition)
    segments = segment_files(directory) if directory.is_dir() else []
    records: list[ReadRecord] = []
    epochs: list[tuple[int, int]] = []
    problem: str | None = None
    for path in segments:
        dump = dump_segment(path)
        fd = os.open(path, os.O_RDONLY)
        try:
            data = read_fully(fd, dump.valid_bytes, 0)
        finally:
            os.close(fd)
        for header, batch in decode_batches(data):
            if not epochs or epochs[-1][0] != header.partition_leader_epoch:
                epochs.append((header.partition_leader_epoch, header.base_offset))
            if header.is_control:
                continue
            records.extend(ReadRecord(partition, r.offset, _text(r.value)) for r in batch)
        if dump.problem:
            problem = f"{path.name}: {dump.problem}"
    tp = TopicPartition(topic, partition)
    data_path = Path(data_dir)
    first = int(segments[0].stem) if segments else 0
    log_start = max(first, read_offsets(data_path / LOG_START_OFFSET_CHECKPOINT).get(tp, 0))
    high_watermark = read_offsets(data_path / REPLICATION_OFFSET_CHECKPOINT).get(tp)
    kept = tuple(r for r in records if r.offset >= log_start)
    return ReplicaLog(broker, partition, kept, log_start, high_watermark, problem,
                      replica_topic_id(directory), tuple(epochs))


def replica_topic_id(directory: Path) -> str | None:
    """The topic id a partition directory's ``partition.metadata`` names, in Kafka's text
    form (None without the file; ``"unreadable"`` for a damaged one)."""
    try:
        topic_id = read_topic_id(directory) if directory.is_dir() else None
    except CorruptFileError:
        return "unreadable"
    return kafka_uuid(topic_id) if topic_id is not None else None


def read_replicas(data_dirs: Mapping[int, str | Path], topic: str,
                  partitions: Iterable[int]) -> dict[int, dict[int, ReplicaLog]]:
    """partition → broker → its copy, for every broker whose data dir holds the partition."""
    result: dict[int, dict[int, ReplicaLog]] = {}
    for partition in partitions:
        result[partition] = {
            broker: read_replica(broker, data_dir, topic, partition)
            for broker, data_dir in sorted(data_dirs.items())
            if partition_dir(data_dir, topic, partition).is_dir()}
    return result


def _text(value: bytes | None) -> str:
    return "" if value is None else value.decode("utf-8", errors="replace")


def truncate_replica(data_dir: str | Path, topic: str, partition: int, keep: int) -> int:
    """Cut a stopped broker's copy of a partition so that its log ends before offset ``keep``
    (at the batch boundary at or below it): later segments are deleted, the last kept one is
    truncated and its indexes removed (the broker rebuilds them). Returns the new log end.

    This is damage on purpose (a disk that lost a tail): use it only on a stopped broker."""
    directory = partition_dir(data_dir, topic, partition)
    end = 0
    for path in segment_files(directory):
        dump = dump_segment(path)
        if dump.base_offset >= keep and dump.base_offset > 0:
            for suffix in (LOG_SUFFIX, ".index", ".timeindex", ".txnindex"):
                path.with_suffix(suffix).unlink(missing_ok=True)
            continue
        cut = next((b for b in dump.batches if b.last_offset >= keep), None)
        if cut is None:
            end = dump.batches[-1].last_offset + 1 if dump.batches else dump.base_offset
            continue
        os.truncate(path, cut.position)
        for suffix in (".index", ".timeindex", ".txnindex"):
            path.with_suffix(suffix).unlink(missing_ok=True)
        end = cut.base_offset
    return end
