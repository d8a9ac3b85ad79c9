"""Durability: clean restarts keep everything; kill -9 during writes loses nothing acknowledged."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from confluent_kafka import Producer

from strom.testing import EmbeddedBroker
from tests.compat.helpers import consume_all, consume_to_end, create_topic, produce_all


def test_restart_reads_everything_back(tmp_path: Path) -> None:
    with EmbeddedBroker(data_dir=tmp_path, config={"log.segment.bytes": 16 * 1024}) as broker:
        create_topic(broker.bootstrap, "durable", 4)
        records = [(f"k{i}".encode(), f"value-{i}-".encode() + os.urandom(40).hex().encode())
                   for i in range(3000)]
        produce_all(broker.bootstrap, "durable", records,
                    **{"compression.type": "zstd", "batch.size": 8192})
        broker.restart()
        messages = consume_all(broker.bootstrap, "durable", 4, len(records))
        assert sorted(m.value() for m in messages) == sorted(v for _, v in records)  # type: ignore[attr-defined]
        assert len(list(tmp_path.glob("durable-0/*.log"))) > 1  # segments rolled


def test_kill_9_during_writes_loses_no_acknowledged_record(tmp_path: Path) -> None:
    broker = EmbeddedBroker(data_dir=tmp_path, config={"log.segment.bytes": 256 * 1024})
    broker.start()
    try:
        create_topic(broker.bootstrap, "crash", 2)
        acked: list[bytes] = []
        stop = threading.Event()

        def produce() -> None:
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2,
                                 "message.timeout.ms": 3000, "acks": "all"})
            i = 0
            while not stop.is_set():
                value = f"r{i}".encode()
                producer.produce("crash", value=value,
                                 on_delivery=lambda err, msg: acked.append(msg.value())
                                 if err is None else None)
                producer.poll(0)
                i += 1
                if i % 1000 == 0:
                    time.sleep(0.01)
            producer.flush(5)

        thread = threading.Thread(target=produce)
        thread.start()
        time.sleep(2.0)
        broker.kill()
        stop.set()
        thread.join()
        assert len(acked) > 1000
        broker.start()
        messages = consume_to_end(broker.bootstrap, "crash", 2)
        stored = {m.value() for m in messages}  # type: ignore[attr-defined]
        assert set(acked) <= stored
        offsets: dict[int, list[int]] = {}
        for m in messages:
            offsets.setdefault(m.partition(), []).append(m.offset())  # type: ignore[attr-defined]
        for offs in offsets.values():
            assert offs == list(range(len(offs)))  # no holes, no corrupt batch served
    finally:
        broker.close()
