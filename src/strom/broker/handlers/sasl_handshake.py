"""SaslHandshake (17), v0-1: choose a SASL mechanism (:mod:`strom.broker.security.sasl`).

On a SASL listener before authentication: NONE and the enabled mechanisms, or
UNSUPPORTED_SASL_MECHANISM with them after ``connection.failed.authentication.delay.ms``
(Kafka delays every failed authentication's answer) and the connection closed. A second
handshake, one on an authenticated connection that may not re-authenticate (see
:mod:`strom.broker.security.sasl`; the dispatcher begins a re-authentication before this
handler runs), or one on a listener without SASL: ILLEGAL_SASL_STATE (Kafka's ``KafkaApis``
answer), connection kept.
"""

from __future__ import annotations

import asyncio

from strom.broker.dispatch import CloseConnection, HandlerResult, Request, ResponseParts
from strom.broker.security.sasl import SaslState
from strom.broker.state import BrokerState
from strom.common.errors import error_class
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.SASL_HANDSHAKE


class SaslHandshakeHandler:
    def __init__(self, state: BrokerState) -> None:
        del state

    def __call__(self, request: Request) -> HandlerResult:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        sasl = request.conn.sasl
        if sasl is None or sasl.authenticated:
            return [api.response(API_KEY, version, {
                "error_code": error_class("ILLEGAL_SASL_STATE").code, "mechanisms": []})]
        if sasl.state is not SaslState.HANDSHAKE:
            raise CloseConnection(f"unexpected SaslHandshake during SASL authentication "
                                  f"(state {sasl.state.value})")
        enabled = list(sasl.settings.mechanisms)
        if not sasl.handshake(str(body.mechanism), version):
            request.conn.close_after_response = True
            return _later(sasl.settings.failure_delay_s, api.response(API_KEY, version, {
                "error_code": error_class("UNSUPPORTED_SASL_MECHANISM").code,
                "mechanisms": enabled}))
        return [api.response(API_KEY, version, {"error_code": 0, "mechanisms": enabled})]


async def _later(delay_s: float, answer: bytes) -> ResponseParts:
    await asyncio.sleep(delay_s)
    return [answer]
