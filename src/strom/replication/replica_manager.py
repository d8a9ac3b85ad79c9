"""The partitions this broker hosts, created from metadata, and the data-path entry points.

Lifecycle: built by the broker server after the log manager has loaded; :meth:`sync` is called
after every metadata change to create logs for new partitions and drop deleted topics.
Owned by the event-loop thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from strom.common.clock import Clock
from strom.common.config import TopicConfig
from strom.common.types import TopicPartition
from strom.metadata.image import MetadataImage
from strom.replication.partition import Partition
from strom.replication.purgatory import DataWaiters
from strom.storage.log_manager import LogManager

log = logging.getLogger("strom.replication")


class ReplicaManager:
    def __init__(
        self,
        logs: LogManager,
        topic_config: Callable[[str], TopicConfig],
        clock: Clock,
        node_id: int,
    ) -> None:
        self.logs = logs
        self.topic_config = topic_config
        self.clock = clock
        self.node_id = node_id
        self.waiters = DataWaiters()
        self._partitions: dict[TopicPartition, Partition] = {}

    def get(self, topic: str, partition: int) -> Partition | None:
        return self._partitions.get(TopicPartition(topic, partition))

    def partitions(self) -> list[Partition]:
        return list(self._partitions.values())

    def sync(self, image: MetadataImage) -> None:
        """Make the hosted partitions match the metadata image."""
        wanted: set[TopicPartition] = set()
        for topic in image.topics.values():
            config = self.topic_config(topic.name)
            for info in topic.partitions:
                if self.node_id not in info.replicas:
                    continue
                tp = TopicPartition(topic.name, info.partition)
                wanted.add(tp)
                current = self._partitions.get(tp)
                if current is None:
                    existing = self.logs.get(tp.topic, tp.partition)
                    plog = existing or self.logs.create(tp.topic, tp.partition, config)
                    self._partitions[tp] = Partition(
                        tp, topic.topic_id, plog, info.leader_epoch, self.waiters, self.clock
                    )
                else:
                    current.leader_epoch = info.leader_epoch
                    current.topic_id = topic.topic_id
        for tp in [tp for tp in self._partitions if tp not in wanted]:
            del self._partitions[tp]
            self.waiters.notify(tp)
        deleted_topics = {plog.topic for plog in self.logs.logs()} - {
            tp.topic for tp in wanted
        }
        for topic_name in deleted_topics:
            self.logs.delete_topic(topic_name)

    def update_configs(self, topic: str) -> None:
        config = self.topic_config(topic)
        for tp, partition in self._partitions.items():
            if tp.topic == topic:
                partition.log.update_config(config)
