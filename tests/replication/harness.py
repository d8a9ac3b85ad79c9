"""A replica manager over real logs in a temporary directory, driven by hand-built images."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path

from strom.common.clock import ManualClock
from strom.common.config import BrokerConfig, TopicConfig, validate_topic_configs
from strom.common.types import TopicPartition
from strom.metadata.image import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
from strom.replication.replica_manager import AppendOrigin, AppendOutcome, ReplicaManager
from strom.storage.log_manager import LogManager
from tests.replication.timers import Timers
from tests.storage.helpers import NOW, make_batch, payload

NODE = 1
TOPIC_ID = uuid.UUID(int=7)


def partition_info(index: int = 0, *, leader: int = NODE, epoch: int = 0,
                   replicas: tuple[int, ...] = (NODE,), isr: tuple[int, ...] | None = None
                   ) -> PartitionInfo:
    return PartitionInfo(index, leader, epoch, replicas, replicas if isr is None else isr)


def image(*partitions: PartitionInfo, topic: str = "t", configs: Mapping[str, str] | None = None,
          internal: bool = False, epoch: int = 1, topic_id: uuid.UUID = TOPIC_ID
          ) -> MetadataImage:
    topics = {topic: TopicInfo(topic, topic_id, tuple(partitions), dict(configs or {}),
                               internal)} if partitions else {}
    brokers = {b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in (1, 2, 3)}
    return MetadataImage("cluster", epoch, NODE, brokers, topics)


class Harness:
    def __init__(self, data_dir: Path, broker: Mapping[str, object] | None = None, *,
                 log_threads: int = 0, scan_only: bool = False) -> None:
        """``scan_only``: the log manager finds the directories on disk without opening
        them (as a broker starts); else it opens every log first."""
        self.clock = ManualClock(NOW)
        self.timers = Timers()
        self.config = BrokerConfig(dict(broker or {}))
        self.logs = LogManager(data_dir, self.config, self.clock)
        self.image = image()
        if scan_only:
            self.logs.scan()
        else:
            self.logs.load(self.topic_config)
        self.replicas = ReplicaManager(self.logs, self.topic_config, self.clock, NODE,
                                       self.timers, log_threads=log_threads)

    def topic_config(self, topic: str) -> TopicConfig:
        info = self.image.topics.get(topic)
        return TopicConfig(self.config, validate_topic_configs(info.configs) if info else {})

    def apply(self, new: MetadataImage) -> None:
        self.image = new
        self.replicas.apply_image(new)

    def produce(self, count: int = 1, *, acks: int = -1, topic: str = "t", partition: int = 0,
                origin: AppendOrigin = AppendOrigin.CLIENT, timeout_ms: int = 1000
                ) -> AppendOutcome:
        batch = make_batch([b"v%d" % i for i in range(count)], timestamps=[NOW] * count)
        return self.replicas.append({TopicPartition(topic, partition): payload(batch)},
                                    required_acks=acks, origin=origin, timeout_ms=timeout_ms)

    def close(self) -> None:
        self.logs.shutdown()
