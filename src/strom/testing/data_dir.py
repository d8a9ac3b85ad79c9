"""Generate a large single-broker data directory quickly, for start-up tests and benchmarks.

    make_data_dir(path, topics=1000, partitions=100)   # 100,000 partition directories

The result is what a single broker (node 0, file-backed metadata) leaves after a clean stop
with that many empty partitions: ``strom-metadata.json`` naming every topic, one
``<topic>-<partition>`` directory each, the data directory's checkpoint files,
``meta.properties`` and the clean-shutdown marker. The first partition is created by strom's
own storage code (:meth:`strom.storage.log.Log.open` then ``close``); every other directory
gets a byte copy of its files, so the formats are strom's and generation costs little more
than the file system calls (~10 s for 100,000 directories here). ``clean=False`` leaves the
marker out, so the broker recovers every log at start, as after a crash.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from strom.broker import meta_properties
from strom.common.clock import SYSTEM_CLOCK
from strom.common.config import BrokerConfig, TopicConfig
from strom.common.types import TopicPartition
from strom.metadata.changes import PutTopic
from strom.metadata.image import BrokerInfo, PartitionInfo, TopicInfo
from strom.metadata.local import LocalMetadataStore
from strom.storage.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    write_offsets,
)
from strom.storage.log import Log
from strom.storage.log_manager import CLEAN_SHUTDOWN_FILE

NODE_ID = 0


def make_data_dir(path: Path, *, topics: int, partitions: int, clean: bool = True,
                  prefix: str = "t") -> list[TopicPartition]:
    """Fill the empty (or missing) directory ``path``; returns the partitions made."""
    path.mkdir(parents=True, exist_ok=True)
    store = LocalMetadataStore(path, BrokerInfo(NODE_ID, "127.0.0.1", 9092))
    names = [f"{prefix}{i:05d}" for i in range(topics)]
    infos = [TopicInfo(name, uuid.uuid4(), tuple(
        PartitionInfo(p, NODE_ID, 0, (NODE_ID,), (NODE_ID,)) for p in range(partitions)))
        for name in names]
    store.write(store.image.epoch, [PutTopic(info) for info in infos])
    meta_properties.ensure(path, store.cluster_id, NODE_ID)
    made = [TopicPartition(name, p) for name in names for p in range(partitions)]
    template = path / str(made[0])
    log = Log.open(template, TopicConfig(BrokerConfig({}), {}), clock=SYSTEM_CLOCK,
                   clean_shutdown=True)
    log.leader_epochs.assign(0, 0)  # as its first leadership wrote it
    log.close()
    files = {entry.name: Path(entry.path).read_bytes() for entry in os.scandir(template)}
    for tp in made[1:]:
        directory = path / str(tp)
        directory.mkdir()
        for name, data in files.items():
            with open(directory / name, "wb") as f:
                f.write(data)
    offsets = {tp: 0 for tp in made}
    for name in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT,
                 REPLICATION_OFFSET_CHECKPOINT):
        write_offsets(path / name, offsets)
    if clean:
        (path / CLEAN_SHUTDOWN_FILE).touch()
    return made
