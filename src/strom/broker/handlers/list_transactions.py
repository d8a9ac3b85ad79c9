"""ListTransactions (66), v0-2 (KIP-664): the transactional ids this broker coordinates, filtered by
state names, producer ids, (v1) how long an Ongoing transaction has run (``duration_filter`` ms, -1:
no filter) and (v2, KIP-1152) a regular expression the whole transactional id must match
(``transactional_id_pattern``; null or empty: no filter; one that does not compile:
INVALID_REGULAR_EXPRESSION and nothing listed). Patterns are RE2's (:mod:`strom.common.patterns`:
linear time, so no pattern stalls the broker), which agrees with Java's for the usual ones
(classes, ``.*``, alternation, anchors); backreferences and lookaround, which Java's regex has,
are refused. State names strom does not know
are echoed in ``unknown_state_filters``; if every state filter is unknown nothing matches, as Kafka.
COORDINATOR_LOAD_IN_PROGRESS while a ``__transaction_state`` partition loads.
"""

from __future__ import annotations

from typing import Any

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import error_class
from strom.common.patterns import PatternError, compile_pattern
from strom.coordinator.txn.model import TxnState
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.LIST_TRANSACTIONS
InvalidRegularExpressionError = error_class("INVALID_REGULAR_EXPRESSION")


class ListTransactionsHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        known = {s for name in body.state_filters if (s := TxnState.from_display(name))}
        unknown = [name for name in body.state_filters if TxnState.from_display(name) is None]
        fields = {"throttle_time_ms": 0, "error_code": 0, "unknown_state_filters": unknown,
                  "transaction_states": []}
        if body.state_filters and not known:
            return [api.response(API_KEY, version, fields)]
        duration = int(body.duration_filter) if version >= 1 else -1
        pattern: Any = None
        if version >= 2 and body.transactional_id_pattern:
            try:
                pattern = compile_pattern(body.transactional_id_pattern)
            except PatternError:
                fields["error_code"] = InvalidRegularExpressionError.code
                return [api.response(API_KEY, version, fields)]
        error, views = self._state.txns.list_transactions(
            known or None, {int(p) for p in body.producer_id_filters} or None, duration)
        fields["error_code"] = error
        access = self._state.access  # only the ids the caller may DESCRIBE
        fields["transaction_states"] = [
            {"transactional_id": v.transactional_id, "producer_id": v.producer_id,
             "transaction_state": v.state.display} for v in views
            if (pattern is None or pattern.fullmatch(v.transactional_id))
            and access.allowed(request, ResourceType.TRANSACTIONAL_ID, v.transactional_id)]
        return [api.response(API_KEY, version, fields)]
