"""SaslAuthenticate (36), v0-2: one SASL token each way (:mod:`strom.broker.security.sasl`).

A refused token is answered SASL_AUTHENTICATION_FAILED with the mechanism's message after
``connection.failed.authentication.delay.ms``, and the connection is closed. On a listener
without SASL, or once authenticated: ILLEGAL_SASL_STATE (connection kept, as Kafka). Before a
handshake on a SASL listener the connection is closed (Kafka's IllegalSaslStateException).
``session_lifetime_ms`` (v1+) is the session's lifetime once authenticated (KIP-368: the
earlier of ``connections.max.reauth.ms`` and the credential's expiry; 0: none), else 0.
"""

from __future__ import annotations

import asyncio
from typing import Any

from strom.broker.dispatch import CloseConnection, HandlerResult, Request, ResponseParts
from strom.broker.security.mechanisms import AuthenticationFailed
from strom.broker.security.sasl import SaslState
from strom.broker.state import BrokerState
from strom.common.errors import error_class
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.SASL_AUTHENTICATE


class SaslAuthenticateHandler:
    def __init__(self, state: BrokerState) -> None:
        del state

    def __call__(self, request: Request) -> HandlerResult:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        sasl = request.conn.sasl
        if sasl is None or sasl.authenticated:
            return [self._answer(version, "ILLEGAL_SASL_STATE",
                                 "SaslAuthenticate request received after successful "
                                 "authentication")]
        if sasl.state is not SaslState.AUTHENTICATING:
            raise CloseConnection("unexpected SaslAuthenticate before SaslHandshake")
        try:
            token = sasl.authenticate(bytes(body.auth_bytes or b""))
        except AuthenticationFailed as exc:
            request.conn.close_after_response = True
            return self._later(sasl.settings.failure_delay_s,
                               self._answer(version, "SASL_AUTHENTICATION_FAILED", str(exc)))
        if not sasl.authenticated:
            return [self._answer(version, None, None, token)]
        request.conn.principal = f"User:{sasl.user}"
        return [self._answer(version, None, None, token, sasl.session_lifetime_ms)]

    @staticmethod
    def _answer(version: int, error: str | None, message: str | None,
                token: bytes = b"", lifetime_ms: int = 0) -> bytes:
        fields: dict[str, Any] = {
            "error_code": error_class(error).code if error else 0,
            "error_message": message, "auth_bytes": token}
        if version >= 1:
            fields["session_lifetime_ms"] = lifetime_ms
        return api.response(API_KEY, version, fields)

    @staticmethod
    async def _later(delay_s: float, answer: bytes) -> ResponseParts:
        await asyncio.sleep(delay_s)
        return [answer]
