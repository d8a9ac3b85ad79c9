"""Retention through the running broker, and a full disk: clear errors, nothing torn."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

from strom.common.errors import ErrorCode
from strom.protocol.records.reader import decode_batches
from strom.protocol.versions import ApiKey
from strom.testing import EmbeddedBroker
from tests.broker.raw import RawClient
from tests.broker.test_data_path import batch, create, fetch, list_offset, produce


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
