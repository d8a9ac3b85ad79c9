"""Helpers shared by handlers: topic-id resolution and leader-epoch checks."""

from __future__ import annotations

import uuid

from strom.common.errors import FencedLeaderEpochError, UnknownLeaderEpochError
from strom.metadata.image import MetadataImage


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
