from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from strom.common.clock import ManualClock
from strom.common.config import BrokerConfig, TopicConfig
from strom.common.types import TopicPartition
from strom.storage.checkpoint import read_offsets
from strom.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from strom.storage.segment import LogSegment
from tests.storage.helpers import NOW, batch_offsets, make_batch, payload, read_all, values

BROKER = BrokerConfig({"log.segment.bytes": "500"})


def configs(topic: str) -> TopicConfig:
    return TopicConfig(BROKER, {})


def manager(tmp_path: Path, clock: ManualClock) -> LogManager:
    logs = LogManager(tmp_path, BROKER, clock)
    logs.load(configs)
    return logs


def fill(logs: LogManager, topic: str, partition: int, batches: int) -> None:
    plog = logs.create(topic, partition, configs(topic))
    for _ in range(batches):
        plog.append(payload(make_batch(values(2, size=30))), leader_epoch=0)


def test_create_get_checkpoint_and_clean_restart(tmp_path: Path, clock: ManualClock,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    logs = manager(tmp_path, clock)
    assert logs.loaded_cleanly is False and logs.logs() == []
    fill(logs, "orders", 0, 10)
    fill(logs, "orders", 1, 3)
    fill(logs, "my-topic.v2", 12, 5)
    assert logs.create("orders", 0, configs("orders")) is logs.get("orders", 0)
    assert logs.get("orders", 7) is None
    assert (tmp_path / "my-topic.v2-12").is_dir()
    logs.get("orders", 0).delete_records_before(4)  # type: ignore[union-attr]
    data = {(p.topic, p.partition): read_all(p) for p in logs.logs()}
    logs.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert read_offsets(tmp_path / "log-start-offset-checkpoint")[
        TopicPartition("orders", 0)] == 4
    assert read_offsets(tmp_path / "recovery-point-offset-checkpoint") == {
        TopicPartition("orders", 0): 20, TopicPartition("orders", 1): 6,
        TopicPartition("my-topic.v2", 12): 10}

    recovered: list[int] = []
    original = LogSegment.recover

    def spy(self: LogSegment) -> object:
        recovered.append(self.base_offset)
        return original(self)

    monkeypatch.setattr(LogSegment, "recover", spy)
    again = manager(tmp_path, clock)
    assert again.loaded_cleanly is True and recovered == []
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # a crash from now on is detected
    assert {(p.topic, p.partition): read_all(p) for p in again.logs()} == data
    assert again.get("orders", 0).log_start_offset == 4  # type: ignore[union-attr]
    again.shutdown()


def test_crash_restart_recovers_from_checkpoint(tmp_path: Path, clock: ManualClock) -> None:
    logs = manager(tmp_path, clock)
    fill(logs, "t", 0, 30)
    plog = logs.get("t", 0)
    assert plog is not None
    logs.flush_due(NOW)  # segments that rolled get fsynced; recovery point follows
    assert plog.recovery_point == plog.active_segment.base_offset > 0
    logs.checkpoint()
    fill(logs, "t", 0, 2)
    expected = read_all(plog)
    active = plog.active_segment
    with open(active.log_path, "r+b") as f:  # the last batch is torn
        f.truncate(active.size - 7)
    # No shutdown: simulate the crash by loading again.
    again = manager(tmp_path, clock)
    assert again.loaded_cleanly is False
    reloaded = again.get("t", 0)
    assert reloaded is not None
    assert read_all(reloaded) == expected[: len(read_all(reloaded))]
    assert batch_offsets(read_all(reloaded))[-1][1] == plog.log_end_offset - 3
    again.shutdown()


def test_delete_topic(tmp_path: Path, clock: ManualClock) -> None:
    logs = manager(tmp_path, clock)
    fill(logs, "gone", 0, 2)
    fill(logs, "gone", 1, 2)
    fill(logs, "kept", 0, 2)
    logs.delete_topic("gone")
    assert [p.topic for p in logs.logs()] == ["kept"]
    assert not any(p.name.startswith("gone") for p in tmp_path.iterdir())
    logs.checkpoint()
    assert set(read_offsets(tmp_path / "recovery-point-offset-checkpoint")) == {
        TopicPartition("kept", 0)}
    # A deletion cut short by a crash leaves a -delete directory, removed at the next load.
    (tmp_path / "old-0.abc-delete").mkdir()
    (tmp_path / "not a partition").mkdir()
    logs.shutdown()
    again = manager(tmp_path, clock)
    assert not (tmp_path / "old-0.abc-delete").exists()
    assert [p.topic for p in again.logs()] == ["kept"]
    again.shutdown()


def test_retention_and_flush_scheduling(tmp_path: Path, clock: ManualClock) -> None:
    broker = BrokerConfig({"log.segment.bytes": "500", "log.retention.ms": "1000",
                           "log.flush.interval.ms": "5000"})
    logs = LogManager(tmp_path, broker, clock)
    logs.load(lambda topic: TopicConfig(broker, {}))
    plog = logs.create("t", 0, TopicConfig(broker, {}))
    for _ in range(20):
        plog.append(payload(make_batch(values(2, size=30))), leader_epoch=0)
    segments = len(plog.segments)
    assert logs.run_retention(NOW + 500) == 0
    assert logs.run_retention(NOW + 2000) > 0
    assert len(plog.segments) == 1 < segments
    logs.flush_due(NOW)
    assert plog.recovery_point == plog.active_segment.base_offset  # rolled segments only
    assert logs.flush_due(NOW + 5000) == 1
    assert plog.recovery_point == plog.log_end_offset
    assert logs.flush_due(NOW + 10_000) == 0  # nothing new
    logs.shutdown()


def test_corrupt_checkpoints_mean_full_recovery(tmp_path: Path, clock: ManualClock) -> None:
    logs = manager(tmp_path, clock)
    fill(logs, "t", 0, 5)
    logs.shutdown()
    (tmp_path / "recovery-point-offset-checkpoint").write_text("garbage")
    (tmp_path / CLEAN_SHUTDOWN_FILE).unlink()
    again = manager(tmp_path, clock)
    plog = again.get("t", 0)
    assert plog is not None and plog.log_end_offset == 10
    again.shutdown()


# -- many partitions: found without opening, new ones cheap, closed without writes ----------

def test_scan_finds_logs_without_opening_them_and_keeps_their_checkpoints(
        tmp_path: Path, clock: ManualClock) -> None:
    logs = manager(tmp_path, clock)
    fill(logs, "a", 0, 4)
    fill(logs, "b", 0, 2)
    logs.get("a", 0).delete_records_before(3)  # type: ignore[union-attr]
    logs.shutdown()
    again = LogManager(tmp_path, BROKER, clock)
    again.scan()
    assert again.loaded_cleanly is True and again.logs() == [] and again.unloaded() == 2
    assert sorted(again.partitions()) == [TopicPartition("a", 0), TopicPartition("b", 0)]
    again.checkpoint()  # the logs not opened keep what the checkpoints said
    assert read_offsets(tmp_path / "log-start-offset-checkpoint")[TopicPartition("a", 0)] == 3
    assert read_offsets(tmp_path / "recovery-point-offset-checkpoint") == {
        TopicPartition("a", 0): 8, TopicPartition("b", 0): 4}
    b = again.create("b", 0, configs("b"))  # opens the one found, does not replace it
    assert b.log_end_offset == 4 and again.unloaded() == 1
    again.delete_logs([TopicPartition("a", 0)])  # never opened: its directory goes too
    assert not (tmp_path / "a-0").exists() and again.unloaded() == 0
    again.shutdown()


def test_a_log_found_by_scan_is_checked_against_its_topic_id_when_opened(
        tmp_path: Path, clock: ManualClock) -> None:
    old, new = uuid.uuid4(), uuid.uuid4()
    logs = manager(tmp_path, clock)
    for topic in ("a", "b", "c"):
        logs.create(topic, 0, configs(topic), old)
        fill(logs, topic, 0, 2)
    logs.shutdown()
    again = LogManager(tmp_path, BROKER, clock)
    again.scan()
    # Its own id: the log found is opened, records and all.
    assert again.create("a", 0, configs("a"), old).log_end_offset == 4
    # Another topic's (deleted and created again under the name while this broker was
    # down): the old log goes, the new one starts empty, labelled with the new id.
    b = again.create("b", 0, configs("b"), new)
    assert b.log_end_offset == 0 and b.topic_id == new and again.unloaded() == 1
    # Deleting one never opened reports the id its directory held.
    assert again.delete_logs([TopicPartition("c", 0)]) == [("c", 0, old)]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["a-0", "b-0"]
    again.shutdown()


def test_a_stop_before_a_log_needing_recovery_was_opened_leaves_recovery_due(
        tmp_path: Path, clock: ManualClock) -> None:
    logs = manager(tmp_path, clock)
    fill(logs, "a", 0, 2)
    fill(logs, "b", 0, 2)
    logs.checkpoint()  # then a crash: no clean-shutdown marker
    crashed = LogManager(tmp_path, BROKER, clock)
    crashed.scan()
    assert crashed.loaded_cleanly is False
    crashed.create("a", 0, configs("a"))  # recovered; b never opened
    crashed.shutdown()
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # b still needs its recovery
    again = manager(tmp_path, clock)
    b = again.get("b", 0)
    assert again.loaded_cleanly is False and b is not None and b.log_end_offset == 4
    again.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()


def test_a_new_log_is_one_file_until_it_has_records(tmp_path: Path, clock: ManualClock,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    logs = manager(tmp_path, clock)
    logs.create("t", 0, configs("t"), sync_dir=False)
    logs.sync_dir()
    assert sorted(p.name for p in (tmp_path / "t-0").iterdir()) == [
        "00000000000000000000.log"]
    logs.shutdown()  # an empty log: no index, snapshot or epoch file written at close
    assert sorted(p.name for p in (tmp_path / "t-0").iterdir()) == [
        "00000000000000000000.log"]
    recovered: list[int] = []
    original = LogSegment.recover
    monkeypatch.setattr(LogSegment, "recover",
                        lambda self: recovered.append(self.base_offset) or original(self))
    again = manager(tmp_path, clock)
    plog = again.create("t", 0, configs("t"))
    assert recovered == []  # an empty segment without index files is not "damaged"
    plog.append(payload(make_batch(values(2, size=30))), leader_epoch=0)
    names = {p.name for p in (tmp_path / "t-0").iterdir()}
    assert {"00000000000000000000.index", "00000000000000000000.timeindex"} <= names
    again.shutdown()
    third = manager(tmp_path, clock)
    reopened = third.get("t", 0)
    assert recovered == [] and reopened is not None and reopened.log_end_offset == 2
    third.shutdown()


def test_closing_an_idle_log_rewrites_nothing(tmp_path: Path, clock: ManualClock) -> None:
    logs = manager(tmp_path, clock)
    fill(logs, "t", 0, 3)
    logs.shutdown()
    snapshots = sorted((tmp_path / "t-0").glob("*.snapshot"))
    stamps = {p: p.stat().st_mtime_ns for p in snapshots}
    again = manager(tmp_path, clock)
    again.shutdown()
    assert {p: p.stat().st_mtime_ns for p in snapshots} == stamps
