"""Every hosted partition is the topic the image names (issue 22): logs carry their topic id
(``partition.metadata``), a log or partition of another id is deleted before the new topic's
partition exists, an old log without an id is adopted, and whoever created a log's directory,
it runs with the metadata's configs."""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path

import pytest

from strom.common.errors import ErrorCode
from strom.common.types import TopicPartition, kafka_uuid
from strom.replication.partition import Partition
from strom.storage.partition_metadata import PARTITION_METADATA_FILE, read_topic_id
from tests.replication.harness import TOPIC_ID, Harness, partition_info
from tests.replication.harness import image as make_image

TP = TopicPartition("t", 0)
NEW_ID = uuid.UUID(int=8)


def hosted(h: Harness) -> Partition:
    p = h.replicas.partition(TP)
    assert p is not None
    return p


def test_new_logs_store_their_topic_id(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.apply(make_image(partition_info(0), partition_info(1)))
    for p in (0, 1):
        assert read_topic_id(tmp_path / f"t-{p}") == TOPIC_ID
        assert (tmp_path / f"t-{p}" / PARTITION_METADATA_FILE).read_text() == (
            f"version: 0\ntopic_id: {kafka_uuid(TOPIC_ID)}")
    h.close()


def test_a_topic_recreated_unseen_in_between_starts_empty(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The broker never sees an image without the topic: the next one names the same
    partition under a new id. The old partition and its records go first; operations waiting
    on it are answered; the new partition starts from an empty log with the new id."""
    async def scenario() -> None:
        h = Harness(tmp_path)
        h.apply(make_image(partition_info(replicas=(1, 2))))
        h.produce(5, acks=1)
        waiting = h.produce(2, acks=-1, timeout_ms=30_000)  # the follower never fetches
        assert waiting.done is not None and not waiting.done.done()
        old = hosted(h)
        with caplog.at_level(logging.INFO, logger="strom.replication"):
            h.apply(make_image(partition_info(replicas=(1, 2)), topic_id=NEW_ID, epoch=2))
        await asyncio.sleep(0)
        assert waiting.done.done()
        assert waiting.results[TP].error is not None
        assert waiting.results[TP].error.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        new = hosted(h)
        assert new is not old and new.topic_id == NEW_ID and old.log.closed
        assert (new.log_end_offset, new.high_watermark, new.log.topic_id) == (0, 0, NEW_ID)
        assert read_topic_id(tmp_path / "t-0") == NEW_ID
        lines = [r.getMessage() for r in caplog.records]
        assert (f"topic t (id {kafka_uuid(TOPIC_ID)}): deleted the logs of partitions [0] "
                f"(the name now belongs to topic id {kafka_uuid(NEW_ID)})") in lines
        assert f"topic t (id {kafka_uuid(NEW_ID)}): created the logs of partitions [0]" in lines
        h.close()
    asyncio.run(scenario())


def test_a_log_left_by_a_deleted_topic_is_never_served(tmp_path: Path) -> None:
    """A broker that was down through the delete: its old log is on disk at start-up, and
    the first image names the partition under another id. The log is deleted, not adopted."""
    h = Harness(tmp_path)
    h.apply(make_image(partition_info()))
    h.produce(5, acks=1)
    h.close()
    again = Harness(tmp_path)  # restarted with the old log on disk
    assert again.logs.get("t", 0) is not None
    again.apply(make_image(partition_info(), topic_id=NEW_ID))
    partition = hosted(again)
    assert (partition.log_end_offset, partition.log.topic_id) == (0, NEW_ID)
    again.close()


def test_a_log_written_before_topic_ids_were_stored_is_adopted_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(tmp_path)
    h.apply(make_image(partition_info()))
    h.produce(5, acks=1)
    h.close()
    (tmp_path / "t-0" / PARTITION_METADATA_FILE).unlink()  # as an earlier strom left it
    again = Harness(tmp_path)
    with caplog.at_level(logging.INFO, logger="strom.replication"):
        again.apply(make_image(partition_info(), topic_id=NEW_ID))
    assert hosted(again).log_end_offset == 5  # the records stay
    assert read_topic_id(tmp_path / "t-0") == NEW_ID
    assert any("adopted the logs of partitions [0]" in r.getMessage() for r in caplog.records)
    again.close()
    third = Harness(tmp_path)  # adopted once: now it is that topic's, and no other's
    third.apply(make_image(partition_info(), topic_id=uuid.UUID(int=9)))
    assert hosted(third).log_end_offset == 0
    third.close()


def test_a_log_prepared_with_default_configs_runs_with_the_topics_configs(
        tmp_path: Path) -> None:
    """The auto-create race: a broker that had not seen the topic prepared partition 0's log
    for its own (losing) creation with the broker defaults; the topic that exists has
    ``cleanup.policy=compact``. The log that serves runs with the topic's configs."""
    h = Harness(tmp_path)
    lost = make_image(partition_info(), topic_id=NEW_ID).topics["t"]  # no configs
    assert h.replicas.prepare_partitions(lost, lost.partitions) == [("t", 0)]
    prepared = h.logs.get("t", 0)
    assert prepared is not None and not prepared.settings.compact_policy
    h.apply(make_image(partition_info(), configs={"cleanup.policy": "compact"}))
    plog = hosted(h).log
    assert plog.settings.compact_policy and plog.topic_id == TOPIC_ID
    h.replicas.discard_partitions([("t", 0)])  # the losing write's undo keeps a hosted log
    assert h.logs.get("t", 0) is plog
    refused = h.produce(1, acks=1)  # keyless, on a compacted topic
    assert refused.results[TP].error is not None
    assert refused.results[TP].error.code == ErrorCode.INVALID_RECORD
    h.close()


def test_an_existing_log_of_the_same_topic_takes_the_metadatas_configs(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    topic = make_image(partition_info()).topics["t"]
    h.replicas.prepare_partitions(topic, topic.partitions)  # created with no overrides
    h.apply(make_image(partition_info(), configs={"segment.bytes": "4096"}))
    assert hosted(h).log.settings.segment_bytes == 4096
    h.close()


def test_an_old_log_that_cannot_be_deleted_keeps_the_partition_offline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Until the old topic's directory is gone the new topic's partition is offline
    (KAFKA_STORAGE_ERROR), never served from it; the next image retries."""
    h = Harness(tmp_path)
    h.apply(make_image(partition_info()))
    h.produce(5, acks=1)

    def failing_rename(*_args: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("strom.storage.log.os.rename", failing_rename)
    monkeypatch.setattr("strom.storage.log_manager.os.rename", failing_rename)
    h.apply(make_image(partition_info(), topic_id=NEW_ID, epoch=2))
    assert h.replicas.partition(TP) is None
    refused = h.produce(1, acks=1)
    assert refused.results[TP].error is not None
    assert refused.results[TP].error.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert read_topic_id(tmp_path / "t-0") == TOPIC_ID  # still there, still the old topic's
    monkeypatch.undo()
    h.apply(make_image(partition_info(), topic_id=NEW_ID, epoch=3))
    assert (hosted(h).log_end_offset, hosted(h).topic_id) == (0, NEW_ID)
    assert read_topic_id(tmp_path / "t-0") == NEW_ID
    h.close()
