"""EndTxn (26), v0-4: commit or abort a producer's ongoing transaction.

Answered once PrepareCommit / PrepareAbort is committed to ``__transaction_state``; the
markers then go out in the background (see :mod:`strom.coordinator.txn.shard`).
PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2. v5 (an epoch bump per transaction,
KIP-890 part 2) is not offered.
"""

from __future__ import annotations

from strom.broker.dispatch import HandlerResult, Request
from strom.broker.handlers.group_common import respond_when_ready
from strom.broker.handlers.init_producer_id import fenced_for
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.END_TXN


class EndTxnHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> HandlerResult:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)

        def answer(error: int) -> bytes:
            return api.response(API_KEY, version, {
                "throttle_time_ms": 0, "error_code": fenced_for(version, 2, error)})

        denied = self._state.access.check(request, ResourceType.TRANSACTIONAL_ID,
                                          body.transactional_id)
        if denied:
            return [answer(denied)]
        return respond_when_ready(
            lambda callback: self._state.txns.end_txn(
                body.transactional_id, int(body.producer_id), int(body.producer_epoch),
                bool(body.committed), callback),
            answer)
