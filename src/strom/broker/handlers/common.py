"""Helpers shared by handlers: topic-id resolution, leader-epoch checks, and the errors Kafka
answers when the data directory fails a write a request needed."""

from __future__ import annotations

import uuid
from typing import Any

from strom.common.errors import (
    FencedLeaderEpochError,
    KafkaError,
    UnknownLeaderEpochError,
    error_class,
)
from strom.metadata.image import MetadataImage
from strom.protocol.versions import ApiKey

# A failed write reaches handlers as KafkaStorageError (reported once by the data directory's
# LogDirHealth). Per-partition and admin answers carry it as KAFKA_STORAGE_ERROR; these APIs
# answer what Kafka answers when the state they need cannot be written, all retriable:
STORAGE_FAILURE_ANSWERS = {
    # the offsets topic cannot be created (Kafka: its partition has no leader yet)
    ApiKey.FIND_COORDINATOR: "COORDINATOR_NOT_AVAILABLE",
    # no producer-id block can be reserved (Kafka's ProducerIdManager while it waits for one)
    ApiKey.INIT_PRODUCER_ID: "COORDINATOR_LOAD_IN_PROGRESS",
}


def topic_name_for(image: MetadataImage, name: str | None, topic_id: bytes | None) -> str | None:
    """The topic's name, from its name or (v13+ data APIs) its id; None if unknown."""
    if topic_id is not None and any(topic_id):
        topic = image.topic_by_id(uuid.UUID(bytes=bytes(topic_id)))
        return topic.name if topic is not None else None
    return name


def check_leader_epoch(requested: int, current: int) -> None:
    """KIP-320: a client's view of the leader epoch must match ours (-1 skips the check)."""
    if requested < 0 or requested == current:
        return
    if requested < current:
        raise FencedLeaderEpochError(f"leader epoch {requested} is older than {current}")
    raise UnknownLeaderEpochError(f"leader epoch {requested} is newer than {current}")


def storage_failure_answer(api_key: ApiKey, failure: KafkaError) -> KafkaError:
    """The error ``api_key`` answers for a storage failure (see STORAGE_FAILURE_ANSWERS)."""
    name = STORAGE_FAILURE_ANSWERS.get(api_key)
    return failure if name is None else error_class(name)(failure.message)


def broker_entries(image: MetadataImage, listener: str | None,
                   id_field: str) -> list[dict[str, Any]]:
    """The brokers as a client on ``listener`` sees them (Metadata, DescribeCluster): each
    broker's endpoint of the same listener name; brokers without it are left out, as Kafka
    does."""
    out = []
    for broker in image.brokers.values():
        address = broker.address(listener)
        if address is not None:
            out.append({id_field: broker.node_id, "host": address[0], "port": address[1],
                        "rack": broker.rack})
    return out
