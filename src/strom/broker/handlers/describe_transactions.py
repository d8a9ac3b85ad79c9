"""DescribeTransactions (65), v0 (KIP-664): the state of transactional ids this broker
coordinates — state name (Kafka's: Empty, Ongoing, PrepareCommit, …), timeout, start time,
producer id and epoch, and the partitions of the open transaction. Errors per id: the
coordinator's (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS), TRANSACTIONAL_ID_NOT_FOUND,
INVALID_REQUEST for an empty id.
"""

from __future__ import annotations

from typing import Any

from strom.broker.access import TXN_ID_DENIED
from strom.broker.dispatch import Request, ResponseParts
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.DESCRIBE_TRANSACTIONS


class DescribeTransactionsHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def _one(self, tid: str) -> dict[str, Any]:
        out: dict[str, Any] = {"error_code": 0, "transactional_id": tid, "transaction_state": "",
                               "transaction_timeout_ms": 0, "transaction_start_time_ms": -1,
                               "producer_id": -1, "producer_epoch": -1, "topics": []}
        error, view = self._state.txns.describe(tid)
        if view is None:
            out["error_code"] = error
            return out
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(view.partitions):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        out.update(transaction_state=view.state.display, transaction_timeout_ms=view.timeout_ms,
                   transaction_start_time_ms=view.start_ms, producer_id=view.producer_id,
                   producer_epoch=view.producer_epoch,
                   topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()])
        return out

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        access = self._state.access
        states = [self._one(tid) if access.allowed(request, ResourceType.TRANSACTIONAL_ID, tid)
                  else {"error_code": TXN_ID_DENIED, "transactional_id": tid,
                        "transaction_state": "", "transaction_timeout_ms": 0,
                        "transaction_start_time_ms": -1, "producer_id": -1,
                        "producer_epoch": -1, "topics": []}
                  for tid in body.transactional_ids]
        return [api.response(API_KEY, version,
                             {"throttle_time_ms": 0, "transaction_states": states})]
