"""Retention through the running broker, and a full disk: clear errors, nothing torn, the
client's connection kept, the failure logged once."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from strom.common.errors import ErrorCode
from strom.protocol.records.reader import decode_batches
from strom.protocol.versions import ApiKey
from strom.testing import EmbeddedBroker
from tests.broker.raw import RawClient
from tests.broker.test_data_path import batch, create, fetch, list_offset, produce
from tests.full_disk import fill, leftover_tmp_files, small_disk

E: Any = ErrorCode


def test_retention_deletes_old_segments_in_the_background(tmp_path: Path) -> None:
    config = {"log.retention.check.interval.ms": 100}
    with EmbeddedBroker(config=config, data_dir=tmp_path) as broker:
        client = RawClient(broker.bootstrap)
        create(client, "short")

        def alter(configs: dict[str, str]) -> None:
            client.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
                {"resource_type": 2, "resource_name": "short", "configs": [
                    {"name": k, "config_operation": 0, "value": v} for k, v in configs.items()]}],
                "validate_only": False})

        alter({"segment.bytes": "1024", "file.delete.delay.ms": "0"})
        old = int(time.time() * 1000) - 60_000
        for i in range(20):
            produce(client, "short", batch([b"x" * 200], timestamps=[old + i]))
        # Default retention (7 days) keeps even these minute-old records ...
        assert list_offset(client, "short", -2)[1] == 0
        # ... until retention shrinks; the background task then deletes old segments.
        alter({"retention.ms": "500"})
        deadline = time.monotonic() + 20
        while list_offset(client, "short", -2)[1] == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        start = list_offset(client, "short", -2)[1]
        # Whole segments went; the active segment always stays.
        assert 0 < start <= 19
        assert list_offset(client, "short", -1)[1] == 20
        assert fetch(client, "short", 0).error_code == ErrorCode.OFFSET_OUT_OF_RANGE  # type: ignore[attr-defined]
        client.close()
    assert len(list((tmp_path / "short-0").glob("*.log"))) < 20


def test_full_disk_gets_storage_error_and_tears_nothing(tmp_path: Path) -> None:
    limit = 64 * 1024  # RLIMIT_FSIZE: writes past it fail with EFBIG, like a full disk

    def limit_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.Popen(
        [sys.executable, "-m", "strom", "broker", "--listen", "127.0.0.1:0",
         "--data-dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, preexec_fn=limit_files)
    try:
        assert proc.stdout is not None
        bootstrap = proc.stdout.readline().split("listening on ")[1].split()[0]
        client = RawClient(bootstrap)
        create(client, "full")
        accepted = 0
        error = 0
        for _ in range(100):
            error, _offset = produce(client, "full", batch([b"y" * 1000]))
            if error:
                break
            accepted += 1
        assert error == ErrorCode.KAFKA_STORAGE_ERROR  # type: ignore[attr-defined]
        assert 0 < accepted < 100
        # Everything acknowledged is readable and the log ends exactly there.
        assert list_offset(client, "full", -1)[1] == accepted
        values = []
        offset = 0
        while offset < accepted:
            part = fetch(client, "full", offset)
            got = [r for _, rs in decode_batches(part.records) for r in rs]  # type: ignore[attr-defined]
            values += got
            offset = got[-1].offset + 1
        assert len(values) == accepted
        # The broker keeps serving other requests.
        md = client.call(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                               "include_topic_authorized_operations": False})
        assert [t.name for t in md.topics] == ["full"]
        client.close()
    finally:
        proc.terminate()
        proc.wait(20)
    size = (tmp_path / "full-0" / "00000000000000000000.log").stat().st_size
    assert size <= limit


def test_full_file_system_answers_every_api_on_the_same_connection(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk") as disk, EmbeddedBroker(data_dir=disk / "data") as broker:
        client = RawClient(broker.bootstrap)
        create(client, "t")
        assert produce(client, "t", batch([b"before"]))[0] == 0
        # The metadata store keeps its previous copy as a hard link and replaces the older
        # copy on each write, freeing that copy's pages for the new file: a full disk then
        # still lets one metadata write through. With the only copy a link to the current
        # file, no write frees anything.
        (disk / "data" / "strom-metadata.json.prev").unlink(missing_ok=True)
        filler = fill(disk)
        error = 0
        for _ in range(100):  # the segment's last page may still hold a few small batches
            error, _offset = produce(client, "t", batch([b"z" * 4000]))
            if error:
                break
        assert error == E.KAFKA_STORAGE_ERROR
        for name in ("new-1", "new-2"):  # the cluster metadata cannot be written
            created = client.call(ApiKey.CREATE_TOPICS, 7, {"topics": [
                {"name": name, "num_partitions": 2, "replication_factor": 1,
                 "assignments": [], "configs": []}], "timeout_ms": 1000,
                "validate_only": False}).topics[0]
            assert created.error_code == E.KAFKA_STORAGE_ERROR
            assert "No space left on device" in created.error_message
        grown = client.call(ApiKey.CREATE_PARTITIONS, 3, {"topics": [
            {"name": "t", "count": 3, "assignments": None}], "timeout_ms": 1000,
            "validate_only": False}).results[0]
        assert grown.error_code == E.KAFKA_STORAGE_ERROR
        found = client.call(ApiKey.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
        assert found.error_code == E.COORDINATOR_NOT_AVAILABLE  # __consumer_offsets: not created
        pid = client.call(ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1,
            "producer_epoch": -1})
        assert pid.error_code == E.COORDINATOR_LOAD_IN_PROGRESS  # no producer-id block
        md = client.call(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                               "include_topic_authorized_operations": False})
        assert [t.name for t in md.topics] == ["t"]
        assert leftover_tmp_files(disk / "data") == []
        # Space freed: every write works again, on the same connection.
        filler.unlink()
        assert produce(client, "t", batch([b"after"]))[0] == 0
        assert create_topic(client, "new-1") == 0
        assert client.call(ApiKey.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0}
                           ).error_code == 0
        client.close()
        output = "".join(broker.output)
    assert "Traceback" not in output and "closing" not in output, output
    failing = [line for line in output.splitlines() if "is failing" in line]
    assert len(failing) == 1 and " ERROR " in failing[0], output
    assert "accepts writes again" in output


def create_topic(client: RawClient, name: str) -> int:
    return int(client.call(ApiKey.CREATE_TOPICS, 7, {"topics": [
        {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
         "configs": []}], "timeout_ms": 1000, "validate_only": False}).topics[0].error_code)
