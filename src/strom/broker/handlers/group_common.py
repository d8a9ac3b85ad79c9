"""Helpers shared by the consumer-group handlers: parked responses and topic checks.

Coordinator operations answer through a callback: at once (validation errors, reads, writes
committed synchronously) or later (a parked JoinGroup / SyncGroup, a write waiting to commit).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from strom.broker.dispatch import HandlerResult, ResponseParts
from strom.metadata.image import MetadataImage

T = TypeVar("T")


def respond_when_ready(
    start: Callable[[Callable[[T], None]], None], encode: Callable[[T], bytes]
) -> HandlerResult:
    """Run a coordinator operation that answers through a callback: encode at once when it
    answered synchronously, otherwise park the request until it does."""
    answered: list[T] = []
    future: asyncio.Future[T] | None = None

    def deliver(result: T) -> None:
        if future is None:
            answered.append(result)
        elif not future.done():
            future.set_result(result)

    start(deliver)
    if answered:
        return [encode(answered[0])]
    future = asyncio.get_running_loop().create_future()
    return _later(future, encode)


async def _later(future: asyncio.Future[T], encode: Callable[[T], bytes]) -> ResponseParts:
    return [encode(await future)]


def partition_exists(image: MetadataImage, topic: str, partition: int) -> bool:
    info = image.topics.get(topic)
    return info is not None and 0 <= partition < len(info.partitions)
