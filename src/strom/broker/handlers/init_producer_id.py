"""InitProducerId (22), v0-5: producer ids for idempotent (non-transactional) producers.

Every call without a transactional id gets a fresh producer id with epoch 0, as Kafka does for
idempotent producers (an epoch bump for a known id is a transactional-coordinator concern).
Transactional ids need the transaction coordinator, which arrives with the transactions work:
until then they are refused with a clear error.
"""

from __future__ import annotations

import logging

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.state import BrokerState
from strom.common.errors import error_class
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.INIT_PRODUCER_ID
log = logging.getLogger("strom.broker.init_producer_id")


class InitProducerIdHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        fields: dict[str, object] = {"throttle_time_ms": 0, "error_code": 0,
                                     "producer_id": -1, "producer_epoch": -1}
        if body.transactional_id is not None:
            log.warning("transactional producer %r refused: transactions are not supported yet",
                        body.transactional_id)
            fields["error_code"] = error_class("TRANSACTIONAL_ID_AUTHORIZATION_FAILED").code
        else:
            fields["producer_id"] = self._state.producer_ids.next_id()
            fields["producer_epoch"] = 0
        return [api.response(API_KEY, version, fields)]
