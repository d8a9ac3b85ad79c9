"""Run a controller decision for a handler: on the elected controller (ZooKeeper metadata)
through :meth:`ControllerDriver.update` (fenced, off the event loop), on a broker with the
file-backed store through :func:`strom.controller.updates.update` (it is its own controller),
elsewhere not at all: ``refuse(NOT_CONTROLLER)``. Admin clients send these requests to the
controller named in Metadata and retry elsewhere on NOT_CONTROLLER (41).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from strom.broker.dispatch import ResponseParts
from strom.broker.state import BrokerState
from strom.common.errors import KafkaError, error_class
from strom.controller.updates import update
from strom.metadata.changes import MetadataChange
from strom.metadata.image import MetadataImage

T = TypeVar("T")
#: A plan given the image and the brokers that may lead (live, not shutting down).
LivePlan = Callable[[MetadataImage, set[int]], tuple[list[MetadataChange], T]]


def on_controller(state: BrokerState, plan: LivePlan[T],
                  answer: Callable[[T], ResponseParts],
                  refuse: Callable[[int], ResponseParts]
                  ) -> ResponseParts | Awaitable[ResponseParts]:
    driver = state.controller
    if driver is None:
        return answer(update(state.store, lambda i: plan(i, set(i.brokers)), False))
    if not driver.active or state.store.image.controller_id != state.node_id:
        return refuse(error_class("NOT_CONTROLLER").code)

    async def decide() -> ResponseParts:
        try:
            result = await driver.update(lambda i: plan(i, driver.live(i)))
        except KafkaError as exc:
            return refuse(exc.code)
        return answer(result)

    return decide()


def is_controller(state: BrokerState) -> bool:
    """Whether this broker answers controller requests (read-only ones, like listing
    reassignments)."""
    driver = state.controller
    return driver is None or (driver.active and state.store.image.controller_id == state.node_id)
