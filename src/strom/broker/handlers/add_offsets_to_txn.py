"""AddOffsetsToTxn (25), v0-4: a group's ``__consumer_offsets`` partition joins a producer's
ongoing transaction, so the offsets it then commits with TxnOffsetCommit become visible
exactly when the transaction commits. PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2.
The first such request creates ``__consumer_offsets`` if needed.
"""

from __future__ import annotations

from strom.broker.dispatch import HandlerResult, Request
from strom.broker.handlers.group_common import respond_when_ready
from strom.broker.handlers.init_producer_id import fenced_for
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import error_class
from strom.common.types import TopicPartition
from strom.coordinator.group.records import OFFSETS_TOPIC
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.ADD_OFFSETS_TO_TXN
INVALID_GROUP_ID = error_class("INVALID_GROUP_ID").code


class AddOffsetsToTxnHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> HandlerResult:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)

        def answer(error: int) -> bytes:
            return api.response(API_KEY, version, {
                "throttle_time_ms": 0, "error_code": fenced_for(version, 2, error)})

        if not body.group_id:
            return [answer(INVALID_GROUP_ID)]
        state = self._state
        denied = (state.access.check(request, ResourceType.TRANSACTIONAL_ID,
                                     body.transactional_id)
                  or state.access.check(request, ResourceType.GROUP, body.group_id))
        if denied:
            return [answer(denied)]
        state.ensure_offsets_topic()
        offsets = TopicPartition(OFFSETS_TOPIC, state.groups.partition_for(body.group_id))
        return respond_when_ready(
            lambda callback: state.txns.add_partitions(
                body.transactional_id, int(body.producer_id), int(body.producer_epoch),
                {offsets}, callback),
            answer)
