"""The server side of SASL OAUTHBEARER (RFC 7628, KIP-255), as Kafka's
``OAuthBearerSaslServer`` answers.

Client's initial response (``\\x01`` separates key/value pairs)::

    n,[a=<authzid>],\\x01auth=Bearer <token>\\x01[<key>=<value>\\x01]*\\x01

- Malformed (or a scheme other than Bearer): refused at once with Kafka's generic message.
- The token is refused by the :class:`~strom.broker.security.jwt_validator.JwtValidator`:
  the server answers (error code NONE) with ``{"status":"invalid_token"}``; the client must
  then send a single ``\\x01``, which is refused with that JSON as the message
  (SASL_AUTHENTICATION_FAILED). The reason is only logged, never sent.
- An authzid other than the token's principal: refused.
- Accepted: an empty answer; the principal is the token's subject and ``expires_ms`` its
  ``exp`` (the session lifetime of KIP-368 re-authentication is bounded by it).
"""

from __future__ import annotations

import re

from strom.broker.security.jwt_validator import InvalidToken, JwtValidator
from strom.broker.security.mechanisms import Admit, AuthenticationFailed, admit_all

_KEY = re.compile(r"[A-Za-z]+")
_VALUE = re.compile(r"[\x21-\x7E \t\r\n]*")
_BEARER = re.compile(r"[Bb][Ee][Aa][Rr][Ee][Rr] +([-_.a-zA-Z0-9~+/]+=*)")
_INVALID = ("Authentication failed during authentication due to invalid credentials with "
            "SASL mechanism OAUTHBEARER")
INVALID_TOKEN = b'{"status":"invalid_token"}'


class OAuthBearerServer:
    """One OAUTHBEARER exchange on one connection."""

    def __init__(self, validator: JwtValidator, admit: Admit = admit_all) -> None:
        self._validator = validator
        self._admit = admit
        self._error: tuple[str, str] | None = None  # (message to send, reason to log)
        self.complete = False
        self.user: str | None = None
        self.expires_ms: int | None = None

    def step(self, token: bytes) -> bytes:
        if self._error is not None and token == b"\x01":
            message, reason = self._error
            raise AuthenticationFailed(message, reason)
        if self.complete:
            raise AuthenticationFailed(_INVALID, "OAUTHBEARER exchange already complete")
        self._error = None
        self._admit(None)  # tokens are signed, nothing to guess: not throttled
        authzid, bearer = parse_initial_response(token)
        try:
            validated = self._validator.validate(bearer)
        except InvalidToken as exc:
            self._error = (INVALID_TOKEN.decode(), f"invalid token: {exc}")
            return INVALID_TOKEN
        if authzid and authzid != validated.principal:
            raise AuthenticationFailed(
                f"Authentication failed: Client requested an authorization id ({authzid}) "
                f"that is different from the token's principal name ({validated.principal})")
        self.complete, self.user = True, validated.principal
        self.expires_ms = validated.expires_ms
        return b""


def parse_initial_response(token: bytes) -> tuple[str, str]:
    """``(authzid or "", bearer token)`` of a client's initial response; AuthenticationFailed
    (Kafka's generic message, the problem for the log) when it is not RFC 7628's form."""
    try:
        text = token.decode("ascii")
    except UnicodeDecodeError:
        raise AuthenticationFailed(_INVALID, "initial response is not ASCII") from None
    gs2, sep, rest = text.partition(",\x01")
    if not sep or not rest.endswith("\x01\x01"):
        raise AuthenticationFailed(_INVALID, "invalid OAUTHBEARER client first message")
    flag, _, authz = gs2.partition(",")
    if flag not in ("n", "y") or (authz and not authz.startswith("a=")):
        raise AuthenticationFailed(_INVALID, "invalid OAUTHBEARER GS2 header")
    authzid = authz[2:].replace("=2C", ",").replace("=3D", "=")
    pairs: dict[str, str] = {}
    for item in rest[:-2].split("\x01"):
        key, eq, value = item.partition("=")
        if not eq or not _KEY.fullmatch(key) or not _VALUE.fullmatch(value) or key in pairs:
            raise AuthenticationFailed(_INVALID, f"invalid OAUTHBEARER key/value {key!r}")
        pairs[key] = value
    auth = pairs.get("auth")
    match = _BEARER.fullmatch(auth) if auth is not None else None
    if match is None:
        raise AuthenticationFailed(_INVALID, "OAUTHBEARER auth is not 'Bearer <token>'")
    return authzid, match.group(1)
