"""AlterClientQuotas (49), v0-1: set or remove client quotas (``validate_only``: only
check), through :mod:`strom.controller.client_quotas`; one result per entry, echoing its
entity. Needs ALTER_CONFIGS on the cluster: otherwise every entry answers
CLUSTER_AUTHORIZATION_FAILED and nothing is written, as Kafka."""

from __future__ import annotations

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import error_class
from strom.controller.client_quotas import QuotaOp, alter
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.ALTER_CLIENT_QUOTAS


class AlterClientQuotasHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        entries = [([(str(e.entity_type), e.entity_name) for e in entry.entity],
                    [QuotaOp(str(op.key), float(op.value), bool(op.remove)) for op in entry.ops])
                   for entry in body.entries]
        codes: list[tuple[int, str | None]]
        if denied := self._state.access.check(request, ResourceType.CLUSTER):
            codes = [(denied, None)] * len(entries)
        else:
            codes = [(0, None) if error is None else (error_class(error[0]).code, error[1])
                     for error in alter(self._state.store, entries, bool(body.validate_only))]
        return [api.response(API_KEY, version, {"throttle_time_ms": 0, "entries": [
            {"error_code": code, "error_message": message,
             "entity": [{"entity_type": t, "entity_name": n} for t, n in raw]}
            for (raw, _), (code, message) in zip(entries, codes, strict=True)]})]
