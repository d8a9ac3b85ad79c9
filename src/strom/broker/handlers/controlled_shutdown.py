"""ControlledShutdown (7), v1-3: a broker about to stop asks the controller to move away the
leadership of the partitions it leads (to another live ISR member, leader epoch + 1) and to
take it out of the ISRs; the answer lists the partitions it still leads that have other
replicas (the broker retries while any remain; see
:mod:`strom.broker.zookeeper_metadata`).

Only the controller answers: another broker NOT_CONTROLLER (41), a broker id that is not
registered BROKER_NOT_AVAILABLE (8), a ``broker_epoch`` (v2+) older than the broker's
current registration (its znode's czxid) STALE_BROKER_EPOCH (77) — a request from before a
restart or session expiry, which must not shut down the broker's new incarnation; -1
(unknown, and every v1 request) is not checked, as in Kafka. A caller without CLUSTER_ACTION:
CLUSTER_AUTHORIZATION_FAILED. Hand-written codec: :mod:`strom.protocol.controlled_shutdown`.
"""

from __future__ import annotations

from collections.abc import Awaitable

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import InvalidRequestError, KafkaError, error_class
from strom.controller.decisions import remaining_after_shutdown
from strom.metadata.changes import MetadataChange, apply_changes
from strom.metadata.image import MetadataImage
from strom.protocol import controlled_shutdown as codec
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.CONTROLLED_SHUTDOWN


class ControlledShutdownHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts | Awaitable[ResponseParts]:
        version = request.version
        try:
            body = codec.decode_request(request.body, version)
        except KafkaError as exc:
            raise InvalidRequestError(str(exc)) from None
        if denied := self._state.access.check(request, ResourceType.CLUSTER):
            return _answer(version, denied)
        state = self._state
        driver = state.controller
        image = state.store.image
        if driver is None or not driver.active or image.controller_id != state.node_id:
            return _answer(version, error_class("NOT_CONTROLLER").code)
        registered = image.brokers.get(body.broker_id)
        if registered is None:
            return _answer(version, error_class("BROKER_NOT_AVAILABLE").code)
        epoch = body.broker_epoch
        if epoch != codec.UNKNOWN_BROKER_EPOCH and epoch < registered.epoch:
            return _answer(version, error_class("STALE_BROKER_EPOCH").code)
        driver.begin_shutdown(body.broker_id)

        def plan(image: MetadataImage) -> tuple[list[MetadataChange], list[tuple[str, int]]]:
            changes = driver.reconcile_plan(image)
            after = apply_changes(image, changes) if changes else image
            return changes, remaining_after_shutdown(after, body.broker_id)

        async def shut_down() -> ResponseParts:
            try:
                remaining = await driver.update(plan)
            except KafkaError as exc:
                return _answer(version, exc.code)
            return _answer(version, 0, remaining)

        return shut_down()


def _answer(version: int, code: int, remaining: list[tuple[str, int]] | None = None
            ) -> ResponseParts:
    return [codec.encode_response(
        codec.ControlledShutdownResponse(code, tuple(remaining or ())), version)]
