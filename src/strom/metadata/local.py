"""Single-node metadata store: the embedded default, one JSON file in the data directory.

File ``<data-dir>/strom-metadata.json`` (written atomically: temp file, fsync, rename, fsync of
the directory)::

    {"version": 1, "cluster_id": "...", "epoch": N,
     "topics": {"name": {"id": "<uuid>", "partitions": P, "configs": {"k": "v"}}}}

The store owns the current :class:`MetadataImage`; every mutation persists first, then swaps
the image, so a crash leaves either the old or the new state. Only the event-loop thread
mutates it.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Mapping
from pathlib import Path

from strom.common.errors import (
    InvalidPartitionsError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from strom.metadata.image import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo

FILE_NAME = "strom-metadata.json"
FORMAT_VERSION = 1


def new_cluster_id() -> str:
    """A Kafka-style cluster id: 16 random bytes, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class LocalMetadataStore:
    """File-backed metadata for a single broker that leads every partition."""

    def __init__(self, data_dir: Path, broker: BrokerInfo, cluster_id: str | None = None) -> None:
        self._path = data_dir / FILE_NAME
        self._broker = broker
        state = self._read()
        if state is None:
            state = {
                "version": FORMAT_VERSION,
                "cluster_id": cluster_id or new_cluster_id(),
                "epoch": 0,
                "topics": {},
            }
            self._write(state)
        self._state = state
        self._image = self._build(state)

    @property
    def image(self) -> MetadataImage:
        return self._image

    @property
    def cluster_id(self) -> str:
        return str(self._state["cluster_id"])

    def set_broker(self, broker: BrokerInfo) -> None:
        """Update the advertised address (known only once the listener is bound)."""
        self._broker = broker
        self._image = self._build(self._state)

    def create_topic(
        self, name: str, partitions: int, configs: Mapping[str, str], internal: bool = False
    ) -> TopicInfo:
        if name in self._state["topics"]:
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        if partitions < 1:
            raise InvalidPartitionsError("Number of partitions must be larger than 0.")
        state = self._copy()
        state["topics"][name] = {
            "id": str(uuid.uuid4()),
            "partitions": partitions,
            "configs": dict(configs),
            "internal": internal,
        }
        self._commit(state)
        return self._image.topics[name]

    def delete_topic(self, name: str) -> TopicInfo:
        topic = self._require(name)
        state = self._copy()
        del state["topics"][name]
        self._commit(state)
        return topic

    def set_partition_count(self, name: str, count: int) -> TopicInfo:
        topic = self._require(name)
        current = len(topic.partitions)
        if count <= current:
            raise InvalidPartitionsError(
                f"Topic currently has {current} partitions, which is higher than or equal to "
                f"the requested {count}."
            )
        state = self._copy()
        state["topics"][name]["partitions"] = count
        self._commit(state)
        return self._image.topics[name]

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicInfo:
        """Replace a topic's overrides with ``configs``."""
        self._require(name)
        state = self._copy()
        state["topics"][name]["configs"] = dict(configs)
        self._commit(state)
        return self._image.topics[name]

    def _require(self, name: str) -> TopicInfo:
        topic = self._image.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        return topic

    def _copy(self) -> dict:
        copied: dict = json.loads(json.dumps(self._state))
        return copied

    def _commit(self, state: dict) -> None:
        state["epoch"] = int(state["epoch"]) + 1
        self._write(state)
        self._state = state
        self._image = self._build(state)

    def _build(self, state: dict) -> MetadataImage:
        node = self._broker.node_id
        topics: dict[str, TopicInfo] = {}
        for name, entry in state["topics"].items():
            parts = tuple(
                PartitionInfo(partition=i, leader=node, leader_epoch=0, replicas=(node,),
                              isr=(node,))
                for i in range(int(entry["partitions"]))
            )
            topics[name] = TopicInfo(
                name=name,
                topic_id=uuid.UUID(entry["id"]),
                partitions=parts,
                configs=dict(entry.get("configs", {})),
                internal=bool(entry.get("internal", False)),
            )
        return MetadataImage(
            cluster_id=str(state["cluster_id"]),
            epoch=int(state["epoch"]),
            controller_id=node,
            brokers={node: self._broker},
            topics=topics,
        )

    def _read(self) -> dict | None:
        try:
            raw = self._path.read_text("utf-8")
        except FileNotFoundError:
            return None
        state: dict = json.loads(raw)
        if state.get("version") != FORMAT_VERSION:
            raise ValueError(f"{self._path}: unsupported metadata format {state.get('version')}")
        return state

    def _write(self, state: dict) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(state, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)
        dir_fd = os.open(self._path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
