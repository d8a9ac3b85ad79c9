"""ConsumerGroupHeartbeat (68), v0-1: a KIP-848 consumer joins, heartbeats, reconciles and
leaves (see :mod:`strom.coordinator.group.consumer.groups`). v1 members generate their own
member id (KIP-1082) and may subscribe by regular expression. Answered once the records the
heartbeat produced are committed. READ on the group (GROUP_AUTHORIZATION_FAILED); the
assignment names topics by id. ``ErrorMessage`` is written only with an error (a tagged-free
nullable field: null is its default)."""

from __future__ import annotations

from strom.broker.dispatch import HandlerResult, Request
from strom.broker.handlers.group_common import group_refused, respond_when_ready
from strom.broker.state import BrokerState
from strom.coordinator.group.consumer.groups import HeartbeatArgs, HeartbeatResult
from strom.coordinator.group.consumer.model import to_wire
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.CONSUMER_GROUP_HEARTBEAT


class ConsumerGroupHeartbeatHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> HandlerResult:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        refused = group_refused(self._state, request, body.group_id)
        if refused is not None:
            return refused
        owned = None
        if body.topic_partitions is not None:
            owned = {tp.topic_id: frozenset(tp.partitions) for tp in body.topic_partitions
                     if tp.topic_id is not None}
        host = request.conn.peer.rpartition(":")[0] or request.conn.peer
        args = HeartbeatArgs(
            group_id=body.group_id, member_id=body.member_id or "",
            member_epoch=int(body.member_epoch), instance_id=body.instance_id,
            rack_id=body.rack_id, rebalance_timeout_ms=int(body.rebalance_timeout_ms),
            subscribed_topic_names=(tuple(body.subscribed_topic_names)
                                    if body.subscribed_topic_names is not None else None),
            subscribed_topic_regex=body.subscribed_topic_regex if version >= 1 else None,
            server_assignor=body.server_assignor, owned=owned,
            client_id=request.conn.client_id or "", client_host=f"/{host}", version=version)

        def encode(result: HeartbeatResult) -> bytes:
            fields: dict[str, object] = {
                "throttle_time_ms": 0, "error_code": result.error,
                "error_message": result.message if result.error else None,
                "member_id": result.member_id, "member_epoch": result.member_epoch,
                "heartbeat_interval_ms": result.heartbeat_interval_ms,
            }
            if result.error == 0 and result.assignment is not None:
                fields["assignment"] = {"topic_partitions": [
                    {"topic_id": topic, "partitions": list(partitions)}
                    for topic, partitions in to_wire(result.assignment)]}
            return api.response(API_KEY, version, fields)

        return respond_when_ready(
            lambda callback: self._state.groups.consumer_heartbeat(args, callback), encode)
