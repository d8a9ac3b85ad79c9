"""What only the file-backed store does: its file format, upgrades from version 1, errors.

The behaviour shared with the other stores is in test_store_contract.py."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from strom.common.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strom.common.errors import KafkaStorageError
from strom.metadata.changes import (
    PutTopic,
    RemoveTopic,
    SetAcls,
    SetBrokerConfigs,
    SetClientQuota,
    SetScramCredential,
)
from strom.metadata.image import BrokerInfo, PartitionInfo, ScramCredential, TopicInfo
from strom.metadata.local import (
    FILE_NAME,
    LEGACY_PRODUCER_ID_FILE,
    PREVIOUS_SUFFIX,
    LocalMetadataStore,
)
from strom.metadata.local_journal import JOURNAL_NAME
from strom.metadata.store import ProducerIdBlock, StaleMetadataError

BROKER = BrokerInfo(3, "127.0.0.1", 9092)
PREVIOUS = FILE_NAME + PREVIOUS_SUFFIX
TOPIC_ID = uuid.UUID("6f1e7e0a-7d3c-4b7e-9b1a-0a5e3c2b1d4f")


def write_v1(data_dir: Path, epoch: int = 7) -> None:
    (data_dir / FILE_NAME).write_text(json.dumps({
        "version": 1, "cluster_id": "c1", "epoch": epoch,
        "topics": {"t": {"id": str(TOPIC_ID), "partitions": 2, "configs": {"segment.ms": "5"},
                         "internal": False},
                   "__consumer_offsets": {"id": str(uuid.uuid4()), "partitions": 1,
                                          "configs": {}, "internal": True}}}))


def test_new_store_writes_version_6_with_the_given_cluster_id(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path, BROKER, "given-id")
    saved = json.loads((tmp_path / FILE_NAME).read_text())
    assert saved == {"version": 6, "cluster_id": "given-id", "epoch": 0, "next_producer_id": 0,
                     "journal_seq": 0, "topics": {}, "broker_configs": {}}
    assert store.image.controller_id == 3 and store.image.brokers == {3: BROKER}


def test_partitions_are_stored_explicitly(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path, BROKER)
    parts = (PartitionInfo(0, 3, 2, (3, 4), (3,)), PartitionInfo(1, -1, 0, (4,), ()))
    store.write(store.image.epoch, [PutTopic(TopicInfo("t", TOPIC_ID, parts, {"a": "b"}))])
    saved = json.loads((tmp_path / FILE_NAME).read_text())["topics"]["t"]
    assert saved == {"id": str(TOPIC_ID), "internal": False, "configs": {"a": "b"},
                     "partitions": [
                         {"replicas": [3, 4], "leader": 3, "leader_epoch": 2, "isr": [3]},
                         {"replicas": [4], "leader": -1, "leader_epoch": 0, "isr": []}]}
    assert LocalMetadataStore(tmp_path, BROKER).image.topics["t"].partitions == parts


def test_version_1_is_read_as_led_here_and_rewritten(tmp_path: Path) -> None:
    write_v1(tmp_path)
    store = LocalMetadataStore(tmp_path, BROKER)
    image = store.image
    assert image.epoch == 7 and image.cluster_id == "c1"
    t = image.topics["t"]
    assert t.topic_id == TOPIC_ID and t.configs == {"segment.ms": "5"} and not t.internal
    assert t.partitions == (PartitionInfo(0, 3, 0, (3,), (3,)), PartitionInfo(1, 3, 0, (3,), (3,)))
    assert image.topics["__consumer_offsets"].internal
    assert json.loads((tmp_path / FILE_NAME).read_text())["version"] == 6
    assert LocalMetadataStore(tmp_path, BROKER).image.topics == image.topics


def test_version_2_is_read_without_broker_configs_and_rewritten(tmp_path: Path) -> None:
    partition = {"replicas": [3], "leader": 3, "leader_epoch": 4, "isr": [3]}
    (tmp_path / FILE_NAME).write_text(json.dumps({
        "version": 2, "cluster_id": "c2", "epoch": 9, "next_producer_id": 2000,
        "topics": {"t": {"id": str(TOPIC_ID), "internal": False, "configs": {"a": "b"},
                         "partitions": [partition]}}}))
    image = LocalMetadataStore(tmp_path, BROKER).image
    assert image.epoch == 9 and image.broker_configs == {}
    assert image.topics["t"].partitions == (PartitionInfo(0, 3, 4, (3,), (3,)),)
    saved = json.loads((tmp_path / FILE_NAME).read_text())
    assert saved["version"] == 6 and saved["broker_configs"] == {}
    assert saved["next_producer_id"] == 2000 and saved["topics"]["t"]["partitions"] == [partition]


def test_broker_configs_are_stored_and_survive_registration(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path, BROKER)
    store.write(store.image.epoch, [SetBrokerConfigs("", {"log.retention.ms": "1000"}),
                                    SetBrokerConfigs("3", {"message.max.bytes": "2048"})])
    assert json.loads((tmp_path / FILE_NAME).read_text())["broker_configs"] == {
        "": {"log.retention.ms": "1000"}, "3": {"message.max.bytes": "2048"}}
    reopened = LocalMetadataStore(tmp_path, BROKER)
    reopened.register_broker(BrokerInfo(3, "advertised", 19092))
    assert reopened.image.broker_configs == {
        "": {"log.retention.ms": "1000"}, "3": {"message.max.bytes": "2048"}}
    reopened.write(reopened.image.epoch, [SetBrokerConfigs("3", {})])
    assert LocalMetadataStore(tmp_path, BROKER).image.broker_configs == {
        "": {"log.retention.ms": "1000"}}


CREDENTIAL = ScramCredential(b"salt-bytes", b"s" * 32, b"k" * 32, 4096)


def test_scram_credentials_are_stored_in_kafkas_text_form(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path, BROKER)
    store.write(store.image.epoch, [SetScramCredential("alice", "SCRAM-SHA-256", CREDENTIAL)])
    stored = json.loads((tmp_path / FILE_NAME).read_text())["scram_credentials"]
    b64 = [base64.b64encode(v).decode() for v in (b"salt-bytes", b"s" * 32, b"k" * 32)]
    assert stored == {"alice": {"SCRAM-SHA-256": (
        f"salt={b64[0]},stored_key={b64[1]},server_key={b64[2]},iterations=4096")}}
    reopened = LocalMetadataStore(tmp_path, BROKER)
    assert reopened.image.scram_credentials == {"alice": {"SCRAM-SHA-256": CREDENTIAL}}
    reopened.write(reopened.image.epoch, [SetScramCredential("alice", "SCRAM-SHA-256", None)])
    assert LocalMetadataStore(tmp_path, BROKER).image.scram_credentials == {}
    assert "scram_credentials" not in json.loads((tmp_path / FILE_NAME).read_text())


ALICE_DEFAULT_CLIENT = (("client-id", None), ("user", "alice"))


def test_client_quotas_are_stored_with_null_for_default_entities(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path, BROKER)
    store.write(store.image.epoch, [
        SetClientQuota(ALICE_DEFAULT_CLIENT, "producer_byte_rate", 1024),
        SetClientQuota((("user", None),), "request_percentage", 12.5)])
    stored = json.loads((tmp_path / FILE_NAME).read_text())["client_quotas"]
    assert stored == [
        {"entity": {"client-id": None, "user": "alice"}, "quotas": {"producer_byte_rate": 1024.0}},
        {"entity": {"user": None}, "quotas": {"request_percentage": 12.5}}]
    reopened = LocalMetadataStore(tmp_path, BROKER)
    assert reopened.image.client_quotas == {
        ALICE_DEFAULT_CLIENT: {"producer_byte_rate": 1024.0},
        (("user", None),): {"request_percentage": 12.5}}
    reopened.write(reopened.image.epoch, [
        SetClientQuota(ALICE_DEFAULT_CLIENT, "producer_byte_rate", None),
        SetClientQuota((("user", None),), "request_percentage", None)])
    assert LocalMetadataStore(tmp_path, BROKER).image.client_quotas == {}
    assert "client_quotas" not in json.loads((tmp_path / FILE_NAME).read_text())


def test_version_4_is_read_without_client_quotas_and_rewritten(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text(json.dumps({
        "version": 4, "cluster_id": "c3", "epoch": 4, "next_producer_id": 0, "topics": {},
        "broker_configs": {"": {"log.retention.ms": "1000"}}}))
    image = LocalMetadataStore(tmp_path, BROKER).image
    assert image.client_quotas == {} and image.broker_configs == {
        "": {"log.retention.ms": "1000"}}
    assert json.loads((tmp_path / FILE_NAME).read_text())["version"] == 6


@pytest.mark.parametrize(("main", "tmp", "expected"), [
    ("2000\n", None, 2000),
    ("2000\n", "3000\n", 3000),  # the rename of a newer reservation was not durable
    ("2000\n", "30", 2000),  # a torn temp file: lower, so ignored by max()
    ("2000\n", "\x00\x00", 2000),  # torn into garbage
    (None, "1000\n", 1000),
])
def test_producer_id_block_file_is_migrated(
    tmp_path: Path, main: str | None, tmp: str | None, expected: int
) -> None:
    write_v1(tmp_path)
    legacy = tmp_path / LEGACY_PRODUCER_ID_FILE
    if main is not None:
        legacy.write_text(main)
    if tmp is not None:
        legacy.with_suffix(".tmp").write_text(tmp)
    store = LocalMetadataStore(tmp_path, BROKER)
    assert not legacy.exists() and not legacy.with_suffix(".tmp").exists()
    assert json.loads((tmp_path / FILE_NAME).read_text())["next_producer_id"] == expected
    assert store.allocate_producer_id_block(1000) == ProducerIdBlock(expected, 1000)


def test_leftover_legacy_file_after_an_upgrade_crash_never_lowers_ids(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path, BROKER)
    store.allocate_producer_id_block(5000)
    (tmp_path / LEGACY_PRODUCER_ID_FILE).write_text("1000\n")
    reopened = LocalMetadataStore(tmp_path, BROKER)
    assert reopened.allocate_producer_id_block(1) == ProducerIdBlock(5000, 1)
    assert not (tmp_path / LEGACY_PRODUCER_ID_FILE).exists()


@pytest.mark.parametrize("content", [
    "{not json",
    json.dumps({"version": 9, "cluster_id": "c", "epoch": 0, "topics": {}}),
    json.dumps({"version": 2, "cluster_id": "c", "epoch": 0, "topics": {"t": {"id": "x"}}}),
    json.dumps([1, 2]),
])
def test_unreadable_file_is_a_value_error(tmp_path: Path, content: str) -> None:
    (tmp_path / FILE_NAME).write_text(content)
    with pytest.raises(ValueError):
        LocalMetadataStore(tmp_path, BROKER)


def test_unreadable_legacy_producer_id_file_is_a_value_error(tmp_path: Path) -> None:
    (tmp_path / LEGACY_PRODUCER_ID_FILE).write_text("many\n")
    with pytest.raises(ValueError):
        LocalMetadataStore(tmp_path, BROKER)


def test_registration_updates_this_broker_only_and_persists_the_epoch(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path, BROKER)
    store.register_broker(BrokerInfo(3, "advertised", 19092, "r1"))
    assert store.image.brokers == {3: BrokerInfo(3, "advertised", 19092, "r1")}
    assert store.image.epoch == 1
    assert LocalMetadataStore(tmp_path, BROKER).image.epoch == 1
    with pytest.raises(ValueError):
        store.register_broker(BrokerInfo(4, "other", 9092))


def test_failed_persist_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalMetadataStore(tmp_path, BROKER)
    before = store.image

    def fail(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("strom.storage.files.os.replace", fail)
    with pytest.raises(KafkaStorageError, match="No space left on device"):
        store.write(before.epoch, [PutTopic(TopicInfo("t", TOPIC_ID, (
            PartitionInfo(0, 3, 0, (3,), (3,)),), {}))])
    with pytest.raises(KafkaStorageError):
        store.allocate_producer_id_block(10)
    monkeypatch.undo()
    assert store.image is before
    assert not list(tmp_path.glob("*.tmp"))  # the temporary file does not outlive the failure
    assert store.allocate_producer_id_block(10) == ProducerIdBlock(0, 10)
    assert LocalMetadataStore(tmp_path, BROKER).image.topics == {}


def _put(store: LocalMetadataStore, name: str) -> None:
    store.write(store.image.epoch, [PutTopic(TopicInfo(name, uuid.uuid4(), (
        PartitionInfo(0, 3, 0, (3,), (3,)),), {}))])


def test_each_write_keeps_the_file_it_replaces_as_the_previous_copy(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path, BROKER, "c1")
    assert not (tmp_path / PREVIOUS).exists()  # the first write replaced nothing
    _put(store, "a")
    before = (tmp_path / FILE_NAME).read_text()
    _put(store, "b")
    assert (tmp_path / PREVIOUS).read_text() == before
    assert set(json.loads((tmp_path / FILE_NAME).read_text())["topics"]) == {"a", "b"}
    assert sorted(p.name for p in tmp_path.iterdir()) == [FILE_NAME, PREVIOUS]


@pytest.mark.parametrize("damage", ["truncate", "empty", "garble", "delete"])
def test_a_damaged_file_is_recovered_from_the_previous_copy(
        tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture) -> None:
    store = LocalMetadataStore(tmp_path, BROKER, "c1")
    store.write(store.image.epoch, [SetBrokerConfigs("", {"log.retention.ms": "1000"}),
                                    SetScramCredential("alice", "SCRAM-SHA-512", CREDENTIAL)])
    _put(store, "a")
    block = store.allocate_producer_id_block(1000)  # the write the damage loses
    epoch = store.image.epoch
    path = tmp_path / FILE_NAME
    text = path.read_text()
    if damage == "delete":
        path.unlink()
    else:
        path.write_text({"truncate": text[:len(text) // 2], "empty": "",
                         "garble": "\x00" * len(text)}[damage])
    with caplog.at_level("WARNING", logger="strom.metadata.local"):
        recovered = LocalMetadataStore(tmp_path, BROKER)
    assert recovered.recovered_from_previous is not None
    assert str(path) in recovered.recovered_from_previous
    [warning] = [r for r in caplog.records if r.levelname == "WARNING"]
    assert "recovered the metadata from the previous copy" in warning.getMessage()
    assert recovered.cluster_id == "c1" and set(recovered.image.topics) == {"a"}
    # Everything else in the copy survives the recovery too (broker configs were dropped).
    assert recovered.image.broker_configs == {"": {"log.retention.ms": "1000"}}
    assert recovered.image.scram_credentials == {"alice": {"SCRAM-SHA-512": CREDENTIAL}}
    assert recovered.image.epoch >= epoch  # never behind the lost write
    assert recovered.allocate_producer_id_block(1000).first > block.last  # no id twice
    again = LocalMetadataStore(tmp_path, BROKER)  # the file was rewritten whole
    assert again.recovered_from_previous is None and set(again.image.topics) == {"a"}


def test_neither_file_readable_is_a_clear_value_error(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path, BROKER, "c1")
    _put(store, "a")
    (tmp_path / FILE_NAME).write_text('{"version": 2, "clus')
    (tmp_path / PREVIOUS).write_text("")
    with pytest.raises(ValueError) as caught:
        LocalMetadataStore(tmp_path, BROKER)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / FILE_NAME} is not valid JSON")
    assert f"the previous copy is unreadable too ({tmp_path / PREVIOUS} is empty)" in message
    (tmp_path / PREVIOUS).unlink()
    with pytest.raises(ValueError, match="there is no previous copy"):
        LocalMetadataStore(tmp_path, BROKER)


ORDERS = ResourcePattern(ResourceType.TOPIC, "orders-", PatternType.PREFIXED)
ALICE_READS = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)


def test_acls_are_stored_by_resource_pattern_with_kafkas_names(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path, BROKER)
    store.write(store.image.epoch, [SetAcls(ORDERS, frozenset({ALICE_READS}))])
    assert json.loads((tmp_path / FILE_NAME).read_text())["acls"] == [
        {"resource_type": "TOPIC", "name": "orders-", "pattern_type": "PREFIXED",
         "entries": [{"principal": "User:alice", "host": "*", "operation": "READ",
                      "permission": "ALLOW"}]}]
    reopened = LocalMetadataStore(tmp_path, BROKER)
    assert reopened.image.acls == {ORDERS: frozenset({ALICE_READS})}
    reopened.write(reopened.image.epoch, [SetAcls(ORDERS, frozenset())])
    assert LocalMetadataStore(tmp_path, BROKER).image.acls == {}
    assert "acls" not in json.loads((tmp_path / FILE_NAME).read_text())


def test_version_3_is_read_without_acls_and_rewritten_as_version_6(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text(json.dumps({
        "version": 3, "cluster_id": "c3", "epoch": 5, "next_producer_id": 0, "topics": {},
        "broker_configs": {}}))
    assert LocalMetadataStore(tmp_path, BROKER).image.acls == {}
    assert json.loads((tmp_path / FILE_NAME).read_text())["version"] == 6


def test_an_unknown_acl_operation_name_makes_the_file_unreadable(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path, BROKER)
    store.write(store.image.epoch, [SetAcls(ORDERS, frozenset({ALICE_READS}))])
    path = tmp_path / FILE_NAME
    path.write_text(path.read_text().replace('"READ"', '"READS"'))
    (tmp_path / PREVIOUS).unlink()
    with pytest.raises(ValueError, match="malformed metadata"):
        LocalMetadataStore(tmp_path, BROKER)


# -- the journal: writes that cost what they change once the file is large ------------------

def _large_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalMetadataStore:
    """A store whose file counts as large from the first byte (every write journals)."""
    monkeypatch.setattr("strom.metadata.local.SMALL_SNAPSHOT_BYTES", 0)
    return LocalMetadataStore(tmp_path, BROKER, "c1")


def test_writes_to_a_large_file_go_to_the_journal_and_are_replayed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _large_store(tmp_path, monkeypatch)
    file_before = (tmp_path / FILE_NAME).read_bytes()
    _put(store, "a")
    _put(store, "b")
    store.write(store.image.epoch, [SetBrokerConfigs("", {"log.retention.ms": "1000"})])
    block = store.allocate_producer_id_block(1000)
    journal = (tmp_path / JOURNAL_NAME).read_text().splitlines()
    assert [json.loads(line)["seq"] for line in journal] == [1, 2, 3, 4]
    assert set(json.loads(journal[1])["topics"]) == {"b"}  # only what the write changed
    assert "broker_configs" in json.loads(journal[2]) and "broker_configs" not in json.loads(
        journal[1])
    reopened = LocalMetadataStore(tmp_path, BROKER)
    assert reopened.image.topics == store.image.topics
    assert reopened.image.broker_configs == {"": {"log.retention.ms": "1000"}}
    assert reopened.image.epoch == store.image.epoch
    assert reopened.allocate_producer_id_block(1).first == block.last + 1
    assert (tmp_path / FILE_NAME).read_bytes() == file_before  # not rewritten meanwhile


def test_the_journal_is_folded_into_the_file_once_as_large_as_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _large_store(tmp_path, monkeypatch)
    monkeypatch.setattr("strom.metadata.local.JOURNAL_MIN_BYTES", 0)
    for i in range(40):
        _put(store, f"t{i}")
    saved = json.loads((tmp_path / FILE_NAME).read_text())
    assert saved["journal_seq"] > 0 and len(saved["topics"]) > 1  # rewritten at least once
    journal = tmp_path / JOURNAL_NAME
    lines = [json.loads(x) for x in journal.read_text().splitlines()]
    assert all(line["seq"] > saved["journal_seq"] for line in lines)
    assert journal.stat().st_size < (tmp_path / FILE_NAME).stat().st_size
    assert set(LocalMetadataStore(tmp_path, BROKER).image.topics) == {f"t{i}" for i in range(40)}


def test_lines_already_in_the_file_are_not_applied_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash after the file was rewritten but before the journal was emptied."""
    store = _large_store(tmp_path, monkeypatch)
    _put(store, "a")
    stale = (tmp_path / JOURNAL_NAME).read_bytes()
    store.write(store.image.epoch, [RemoveTopic("a")])
    store._rewrite(store.image, 0)  # folds both lines in, empties the journal
    (tmp_path / JOURNAL_NAME).write_bytes(stale)  # as if the journal had not been emptied
    assert "a" not in LocalMetadataStore(tmp_path, BROKER).image.topics


@pytest.mark.parametrize("tail", [b'{"seq": 9, "epo', b"\x00\x00\x00"])
def test_a_torn_last_line_is_dropped_and_cut(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tail: bytes) -> None:
    store = _large_store(tmp_path, monkeypatch)
    _put(store, "a")
    journal = tmp_path / JOURNAL_NAME
    sound = journal.read_bytes()
    with journal.open("ab") as f:
        f.write(tail)
    reopened = LocalMetadataStore(tmp_path, BROKER)
    assert set(reopened.image.topics) == {"a"}
    assert journal.read_bytes() == sound  # cut back before the next append
    _put(reopened, "b")
    assert set(LocalMetadataStore(tmp_path, BROKER).image.topics) == {"a", "b"}


@pytest.mark.parametrize("off_loop", [False, True], ids=["write", "write_async"])
def test_a_failed_journal_append_changes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, off_loop: bool) -> None:
    store = _large_store(tmp_path, monkeypatch)
    _put(store, "a")
    before = store.image

    def fail(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("strom.metadata.local_journal.os.fsync", fail)
    with pytest.raises(KafkaStorageError, match="No space left on device"):
        if off_loop:
            asyncio.run(store.write_async(before.epoch, [_topic("b")]))
        else:
            _put(store, "b")
    monkeypatch.undo()
    monkeypatch.setattr("strom.metadata.local.SMALL_SNAPSHOT_BYTES", 0)
    assert store.image is before
    assert set(LocalMetadataStore(tmp_path, BROKER).image.topics) == {"a"}
    _put(store, "c")
    assert set(LocalMetadataStore(tmp_path, BROKER).image.topics) == {"a", "c"}


def test_recovery_from_the_previous_copy_applies_the_journal_to_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _large_store(tmp_path, monkeypatch)
    _put(store, "a")
    store._rewrite(store.image, 0)   # the file: {a}; its previous copy: {}
    _put(store, "b")
    store._rewrite(store.image, 0)   # the file: {a, b}; its previous copy: {a}
    _put(store, "c")                 # journal: c
    block = store.allocate_producer_id_block(1000)
    (tmp_path / FILE_NAME).write_text("")
    recovered = LocalMetadataStore(tmp_path, BROKER)
    assert recovered.recovered_from_previous is not None
    assert set(recovered.image.topics) == {"a", "c"}  # b was only in the damaged file
    assert recovered.allocate_producer_id_block(1).first > block.last
    _put(recovered, "d")
    assert set(LocalMetadataStore(tmp_path, BROKER).image.topics) == {"a", "c", "d"}


# -- writes persisted off the event loop (write_async) ---------------------------------------

def _topic(name: str) -> PutTopic:
    return PutTopic(TopicInfo(name, uuid.uuid4(), (PartitionInfo(0, 3, 0, (3,), (3,)),), {}))


class _HeldWrites:
    """Holds every ``_write_out`` of ``store`` on its worker thread until released."""

    def __init__(self, store: LocalMetadataStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        original = store._write_out

        def held(persist: Any) -> None:
            self.started.set()
            assert self.release.wait(10)
            original(persist)

        monkeypatch.setattr(store, "_write_out", held)


@pytest.mark.parametrize("large", [False, True], ids=["file", "journal"])
def test_an_async_write_is_installed_once_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, large: bool) -> None:
    if large:
        monkeypatch.setattr("strom.metadata.local.SMALL_SNAPSHOT_BYTES", 0)
    store = LocalMetadataStore(tmp_path, BROKER, "c1")
    seen: list[int] = []
    store.subscribe(lambda image: seen.append(image.epoch))
    held = _HeldWrites(store, monkeypatch)
    before = store.image

    async def main() -> None:
        write = asyncio.ensure_future(store.write_async(before.epoch, [_topic("a"), _topic("b")]))
        while not held.started.is_set():
            await asyncio.sleep(0.001)
        assert store.image is before and seen == []  # not durable yet: not visible
        held.release.set()
        image = await write
        assert store.image is image and seen == [image.epoch]

    asyncio.run(main())
    assert set(LocalMetadataStore(tmp_path, BROKER).image.topics) == {"a", "b"}


def test_a_write_made_while_an_async_one_is_written_comes_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _large_store(tmp_path, monkeypatch)
    held = _HeldWrites(store, monkeypatch)
    epoch = store.image.epoch

    async def main() -> None:
        write = asyncio.ensure_future(store.write_async(epoch, [_topic("a")]))
        while not held.started.is_set():
            await asyncio.sleep(0.001)
        held.release.set()
        # planned against the image before the async write: stale once that is installed
        with pytest.raises(StaleMetadataError):
            store.write(epoch, [_topic("b")])
        assert set(store.image.topics) == {"a"}
        store.write(store.image.epoch, [_topic("b")])
        block = store.allocate_producer_id_block(10)
        await write
        assert set(store.image.topics) == {"a", "b"}
        assert LocalMetadataStore(tmp_path, BROKER).allocate_producer_id_block(1).first == \
            block.last + 1

    asyncio.run(main())
    assert set(LocalMetadataStore(tmp_path, BROKER).image.topics) == {"a", "b"}


def test_an_async_write_overtaken_while_encoding_is_stale(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("strom.common.slices.SLICE_S", 0.0)
    store = LocalMetadataStore(tmp_path, BROKER, "c1")
    epoch = store.image.epoch

    async def main() -> None:
        write = asyncio.ensure_future(store.write_async(epoch, [_topic("a"), _topic("b")]))
        await asyncio.sleep(0)  # it has begun, and yields between its steps
        store.write(epoch, [_topic("c")])
        with pytest.raises(StaleMetadataError):
            await write

    asyncio.run(main())
    assert set(LocalMetadataStore(tmp_path, BROKER).image.topics) == {"c"}


def test_an_async_write_interrupted_by_a_producer_id_block_is_encoded_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("strom.common.slices.SLICE_S", 0.0)
    store = _large_store(tmp_path, monkeypatch)

    async def main() -> None:
        write = asyncio.ensure_future(store.write_async(store.image.epoch, [_topic("a")]))
        await asyncio.sleep(0)
        block = store.allocate_producer_id_block(100)
        await write
        reopened = LocalMetadataStore(tmp_path, BROKER)
        assert set(reopened.image.topics) == {"a"}
        assert reopened.allocate_producer_id_block(1).first == block.last + 1

    asyncio.run(main())


def test_an_async_write_cancelled_while_written_is_still_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalMetadataStore(tmp_path, BROKER, "c1")
    held = _HeldWrites(store, monkeypatch)

    async def main() -> None:
        write = asyncio.ensure_future(store.write_async(store.image.epoch, [_topic("a")]))
        while not held.started.is_set():
            await asyncio.sleep(0.001)
        write.cancel()
        threading.Timer(0.05, held.release.set).start()
        with pytest.raises(asyncio.CancelledError):
            await write
        assert set(store.image.topics) == {"a"}  # installed before the cancellation ended

    asyncio.run(main())
    assert set(LocalMetadataStore(tmp_path, BROKER).image.topics) == {"a"}


def test_the_file_and_journal_encodings_read_back_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The encoding a topic at a time is compact JSON, keys sorted as json.dumps sorts them
    (the file's topics in the image's order)."""
    monkeypatch.setattr("strom.metadata.local.CHUNK_TOPICS", 2)  # encoded in chunks of 2
    store = _large_store(tmp_path, monkeypatch)
    for name in ("b", "a"):
        asyncio.run(store.write_async(store.image.epoch, [_topic(name)]))
    asyncio.run(store.write_async(store.image.epoch, [_topic(f"c{i}") for i in range(5)]))
    store.write(store.image.epoch, [SetBrokerConfigs("", {"log.retention.ms": "1000"})])
    for line in (tmp_path / JOURNAL_NAME).read_text().splitlines():
        state = json.loads(line)
        assert line == json.dumps(state, sort_keys=True, separators=(",", ":"))
    store._rewrite(store.image, 0)
    state = json.loads((tmp_path / FILE_NAME).read_text())
    assert list(state) == sorted(state)
    assert list(state["topics"]) == ["b", "a", *(f"c{i}" for i in range(5))]
    assert (tmp_path / FILE_NAME).read_text() == json.dumps(
        {**state, "topics": {}}, sort_keys=True, separators=(",", ":")).replace(
        '"topics":{}', '"topics":' + json.dumps(state["topics"], separators=(",", ":")))
    assert LocalMetadataStore(tmp_path, BROKER).image.topics == store.image.topics


def test_an_unexpected_failure_of_an_async_write_reaches_its_writer_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not an OSError (a bug): raised to the async writer, not to the next write."""
    store = LocalMetadataStore(tmp_path, BROKER, "c1")
    before = store.image

    def broken(persist: Any) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr(store, "_write_out", broken)
    with pytest.raises(RuntimeError, match="bug"):
        asyncio.run(store.write_async(before.epoch, [_topic("a")]))
    monkeypatch.undo()
    assert store.image is before
    _put(store, "b")
    assert set(LocalMetadataStore(tmp_path, BROKER).image.topics) == {"b"}
