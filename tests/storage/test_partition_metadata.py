"""``partition.metadata``: Kafka's format, a log's topic id across restarts, labelling rules."""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path

import pytest

from strom.common.clock import ManualClock
from strom.common.config import BrokerConfig, TopicConfig
from strom.common.types import TopicPartition, kafka_uuid, parse_kafka_uuid
from strom.storage import partition_metadata
from strom.storage.files import CorruptFileError
from strom.storage.log import Log
from strom.storage.log_manager import LogManager
from strom.storage.partition_metadata import (
    PARTITION_METADATA_FILE,
    decode,
    encode,
    read_topic_id,
    write_topic_id,
)
from tests.storage.conftest import OpenLog
from tests.storage.helpers import make_batch, payload

TOPIC_ID = uuid.UUID("d2a13c9e-7f7a-4b1e-9a55-0b7f6f2c4e11")
OTHER = uuid.UUID(int=5)


def test_kafkas_text_format() -> None:
    text = f"version: 0\ntopic_id: {kafka_uuid(TOPIC_ID)}"
    assert encode(TOPIC_ID) == text.encode()
    assert len(kafka_uuid(TOPIC_ID)) == 22 and "=" not in kafka_uuid(TOPIC_ID)
    assert parse_kafka_uuid(kafka_uuid(TOPIC_ID)) == TOPIC_ID
    assert decode(text.encode()) == TOPIC_ID
    # a trailing newline and extra spaces after the colon, as other writers may leave
    assert decode(f"version:   0\ntopic_id:\t{kafka_uuid(TOPIC_ID)}\n".encode()) == TOPIC_ID


@pytest.mark.parametrize("data", [
    b"", b"version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", b"version: 0\n",
    b"version: 0\ntopic_id: not base64!", b"version: 0\ntopic_id: AAAA",
    b"\xff\xfe", b"version 0\ntopic_id AAAAAAAAAAAAAAAAAAAAAA",
])
def test_anything_else_is_corrupt(data: bytes) -> None:
    with pytest.raises(CorruptFileError):
        decode(data)


def test_read_and_write(tmp_path: Path) -> None:
    assert read_topic_id(tmp_path) is None  # no file: a log from before topic ids
    write_topic_id(tmp_path, TOPIC_ID)
    assert read_topic_id(tmp_path) == TOPIC_ID
    assert [p.name for p in tmp_path.iterdir()] == [PARTITION_METADATA_FILE]  # no .tmp left


def test_a_log_keeps_its_topic_id_and_is_never_relabelled(open_log: OpenLog,
                                                          tmp_path: Path) -> None:
    plog = open_log()
    assert plog.topic_id is None
    plog.assign_topic_id(TOPIC_ID)
    plog.assign_topic_id(TOPIC_ID)  # the same id again: nothing to do
    with pytest.raises(ValueError, match="belongs to topic id"):
        plog.assign_topic_id(OTHER)
    plog.close()
    reopened = open_log(clean_shutdown=True)
    assert reopened.topic_id == TOPIC_ID
    reopened.assign_topic_id(OTHER, replace=True)  # metadata recovery's one exception
    assert read_topic_id(tmp_path / "topic-0") == OTHER


def test_a_damaged_file_reads_as_no_id(open_log: OpenLog, tmp_path: Path,
                                       caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "topic-0"
    directory.mkdir()
    (directory / PARTITION_METADATA_FILE).write_bytes(b"garbage")
    with caplog.at_level(logging.WARNING, logger="strom.storage.log"):
        plog = open_log()
    assert plog.topic_id is None  # the owner adopts it again rather than lose its records
    assert "ignoring a damaged partition.metadata" in caplog.text


def test_log_manager_labels_new_logs_all_or_nothing(tmp_path: Path, clock: ManualClock,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    config = BrokerConfig({})
    logs = LogManager(tmp_path, config, clock)
    logs.load(lambda _topic: TopicConfig(config, {}))
    fsyncs: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        fsyncs.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    plog = logs.create("t", 0, TopicConfig(config, {}), TOPIC_ID, sync_dir=False)
    assert fsyncs == []  # a new log is created without one (its first data syncs the id)
    assert plog.topic_id == TOPIC_ID and read_topic_id(tmp_path / "t-0") == TOPIC_ID
    assert sorted(p.name for p in (tmp_path / "t-0").iterdir()) == [
        "00000000000000000000.log", PARTITION_METADATA_FILE]
    monkeypatch.undo()

    def full_disk(_directory: Path, _topic_id: uuid.UUID) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(partition_metadata, "write_new", full_disk)
    with pytest.raises(OSError):
        logs.create("t", 1, TopicConfig(config, {}), TOPIC_ID)
    assert not (tmp_path / "t-1").exists() and logs.get("t", 1) is None
    monkeypatch.undo()
    logs.shutdown()
    again = LogManager(tmp_path, config, clock)
    again.load(lambda _topic: TopicConfig(config, {}))
    reloaded = again.get("t", 0)
    assert reloaded is not None and reloaded.topic_id == TOPIC_ID
    gone = again.delete_logs([TopicPartition("t", 0)])
    assert [(g.topic, g.partition, g.topic_id) for g in gone] == [("t", 0, TOPIC_ID)]
    again.shutdown()


def _batch() -> memoryview:
    return payload(make_batch([b"v"]))


@pytest.mark.parametrize("first_write", ["append", "append_as_follower", "flush", "close"])
def test_a_new_log_makes_its_topic_id_durable_before_its_first_data(
        tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch,
        first_write: str) -> None:
    """Kafka's maybeFlushMetadataFile: creating a log costs no fsync; the file is fsynced
    (with its directory) before any record is written, and by a flush or close."""
    config = TopicConfig(BrokerConfig({}), {})
    directory = tmp_path / "t-0"
    directory.mkdir()
    plog = Log.create_new(directory, config, clock=clock, topic_id=TOPIC_ID)
    assert read_topic_id(directory) == TOPIC_ID and not plog.metadata_synced
    syncs: list[int] = []  # the log's size on disk at each sync
    real_sync = partition_metadata.sync

    def sync(where: Path) -> None:
        syncs.append(sum(f.stat().st_size for f in where.glob("*.log")))
        real_sync(where)

    monkeypatch.setattr(partition_metadata, "sync", sync)
    if first_write == "append":
        plog.append(_batch(), leader_epoch=0)
    elif first_write == "append_as_follower":
        plog.append_as_follower(_batch())
    elif first_write == "flush":
        plog.flush()
    else:
        plog.close()
    assert syncs == [0] and plog.metadata_synced  # before a byte of data
    if not plog.closed:
        plog.append(_batch(), leader_epoch=0)
        plog.flush()
        assert syncs == [0]  # once
        plog.close()


def test_a_new_log_whose_metadata_sync_fails_takes_no_data(
        tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    config = TopicConfig(BrokerConfig({}), {})
    directory = tmp_path / "t-0"
    directory.mkdir()
    plog = Log.create_new(directory, config, clock=clock, topic_id=TOPIC_ID)

    def broken(_where: Path) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(partition_metadata, "sync", broken)
    with pytest.raises(OSError):
        plog.append(_batch(), leader_epoch=0)
    assert plog.log_end_offset == 0
    assert (directory / "00000000000000000000.log").stat().st_size == 0
    monkeypatch.undo()
    assert plog.append(_batch(), leader_epoch=0).base_offset == 0  # once the disk answers
    plog.close()


def test_a_new_logs_file_cut_by_a_crash_reads_as_no_id(tmp_path: Path) -> None:
    """A crash before the sync can leave the file empty: no data relies on it, so it reads
    as no file (the owner labels the log again), silently."""
    (tmp_path / PARTITION_METADATA_FILE).write_bytes(b"")
    assert read_topic_id(tmp_path) is None
