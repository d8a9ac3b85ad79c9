"""JoinGroup (11), v0-9: join or rejoin a classic group; parked until the join phase ends.

v0 carries no rebalance timeout: the session timeout stands for it, as on Kafka (v0 and v1
are served again since Kafka 4.0.1 / 4.1, KAFKA-19444: librdkafka before 2.11 needs v0
listed, kafka-go joins with v1); v0 / v1 answers carry no throttle time.
v4+ first joins without a member id get MEMBER_ID_REQUIRED with an id (KIP-394); v5+ carry
``group_instance_id`` (static membership, KIP-345); v7+ return the protocol type; v9+ tell a
rejoining static leader to skip the assignment (KIP-814).
"""

from __future__ import annotations

from strom.broker.dispatch import HandlerResult, Request
from strom.broker.handlers.group_common import group_refused, respond_when_ready
from strom.broker.state import BrokerState
from strom.coordinator.group.model import JoinResult
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.JOIN_GROUP


class JoinGroupHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> HandlerResult:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        refused = group_refused(self._state, request, body.group_id)
        if refused is not None:
            return refused
        instance_id = body.group_instance_id if version >= 5 else None
        host = request.conn.peer.rpartition(":")[0] or request.conn.peer
        coordinator = self._state.groups

        def encode(result: JoinResult) -> bytes:
            fields = {
                "throttle_time_ms": 0,
                "error_code": result.error,
                "generation_id": result.generation,
                "protocol_name": result.protocol_name if version >= 7 else (
                    result.protocol_name or ""),
                "leader": result.leader,
                "member_id": result.member_id,
                "members": [
                    {"member_id": mid, "group_instance_id": iid, "metadata": metadata}
                    for mid, iid, metadata in result.members
                ],
            }
            if version >= 7:
                fields["protocol_type"] = result.protocol_type
            if version >= 9:
                fields["skip_assignment"] = result.skip_assignment
            return api.response(API_KEY, version, fields)

        return respond_when_ready(
            lambda callback: coordinator.join_group(
                group_id=body.group_id,
                member_id=body.member_id or "",
                group_instance_id=instance_id,
                client_id=request.conn.client_id or "",
                client_host=f"/{host}",
                session_timeout_ms=int(body.session_timeout_ms),
                rebalance_timeout_ms=int(body.rebalance_timeout_ms if version >= 1
                                         else body.session_timeout_ms),
                protocol_type=body.protocol_type,
                protocols=[(p.name, bytes(p.metadata)) for p in body.protocols],
                require_known_member_id=version >= 4,
                callback=callback,
            ),
            encode,
        )
