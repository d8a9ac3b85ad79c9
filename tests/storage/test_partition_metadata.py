"""``partition.metadata``: Kafka's format, a log's topic id across restarts, labelling rules."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest

from strom.common.clock import ManualClock
from strom.common.config import BrokerConfig, TopicConfig
from strom.common.types import TopicPartition, kafka_uuid, parse_kafka_uuid
from strom.storage import partition_metadata
from strom.storage.files import CorruptFileError
from strom.storage.log_manager import LogManager
from strom.storage.partition_metadata import (
    PARTITION_METADATA_FILE,
    decode,
    encode,
    read_topic_id,
    write_topic_id,
)
from tests.storage.conftest import OpenLog

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
    plog = logs.create("t", 0, TopicConfig(config, {}), TOPIC_ID)
    assert plog.topic_id == TOPIC_ID and read_topic_id(tmp_path / "t-0") == TOPIC_ID

    def full_disk(_directory: Path, _topic_id: uuid.UUID) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(partition_metadata, "write_topic_id", full_disk)
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
