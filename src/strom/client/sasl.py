"""Client sides of the SASL mechanisms, sans-io: PLAIN (RFC 4616), SCRAM-SHA-256 / -512
(RFC 5802 / 7677, without channel binding, as Kafka) and OAUTHBEARER (RFC 7628).

A mechanism gives its first token (:meth:`first`), then answers each server token
(:meth:`respond`) with the next one, or None when the exchange is over on its side. A server
answer that proves the server wrong (a SCRAM server signature that does not verify) raises
SASL_AUTHENTICATION_FAILED's error. The tokens travel in
SaslAuthenticate requests after a v1 SaslHandshake (:mod:`strom.client.conn`).

OAUTHBEARER: the server answers a refused token with an error document
(``{"status":"invalid_token"}``) instead of failing; the client then sends ``\\x01`` and
the server's failure carries the document.
"""

from __future__ import annotations

import base64
import hmac
import secrets
from typing import Protocol

from strom.client.security import ClientSecurity
from strom.common import scram
from strom.common.errors import error_class

SaslAuthenticationFailedError = error_class("SASL_AUTHENTICATION_FAILED")


class MechanismClient(Protocol):
    def first(self) -> bytes: ...

    def respond(self, server_token: bytes) -> bytes | None: ...


class PlainClient:
    def __init__(self, username: str, password: str) -> None:
        self._token = f"\x00{username}\x00{password}".encode()

    def first(self) -> bytes:
        return self._token

    def respond(self, server_token: bytes) -> bytes | None:
        return None


class ScramClient:
    """client-first ``n,,n=<user>,r=<nonce>``; client-final ``c=biws,r=<nonce>,p=<proof>``;
    the server-final ``v=<signature>`` is checked."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self._mechanism, self._password = mechanism, password
        name = username.replace("=", "=3D").replace(",", "=2C")
        self._first_bare = f"n={name},r={secrets.token_urlsafe(18)}"
        self._server_signature: bytes | None = None

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def respond(self, server_token: bytes) -> bytes | None:
        text = server_token.decode("utf-8", "replace")
        if self._server_signature is not None:
            fields = _fields(text)
            if "e" in fields:
                raise SaslAuthenticationFailedError(f"SCRAM server error: {fields['e']}")
            given = base64.b64decode(fields.get("v", ""))
            if not hmac.compare_digest(given, self._server_signature):
                raise SaslAuthenticationFailedError("SCRAM server signature does not verify: "
                                                    "the server does not know the password")
            return None
        fields = _fields(text)
        nonce, salt, iterations = fields.get("r", ""), fields.get("s"), fields.get("i", "")
        client_nonce = self._first_bare.split(",r=", 1)[1]
        if not nonce.startswith(client_nonce) or salt is None or not iterations.isdigit():
            raise SaslAuthenticationFailedError(f"invalid SCRAM server-first message {text!r}")
        mech = self._mechanism
        salted = scram.salted_password(mech, self._password, base64.b64decode(salt),
                                       int(iterations))
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        client_key = scram.client_key(mech, salted)
        signature = scram.hmac_digest(mech, scram.digest(mech, client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = scram.hmac_digest(mech, scram.server_key(mech, salted),
                                                   auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


class OAuthBearerClient:
    def __init__(self, token: str) -> None:
        self._token = token
        self._refused = False

    def first(self) -> bytes:
        return f"n,,\x01auth=Bearer {self._token}\x01\x01".encode()

    def respond(self, server_token: bytes) -> bytes | None:
        if not server_token or self._refused:
            return None
        self._refused = True  # an error document: acknowledge it, the server then fails
        return b"\x01"


def mechanism_client(security: ClientSecurity, oauth_token: str | None) -> MechanismClient:
    mechanism = security.sasl_mechanism
    if mechanism == "OAUTHBEARER":
        assert oauth_token is not None
        return OAuthBearerClient(oauth_token)
    assert security.username is not None and security.password is not None
    if mechanism == "PLAIN":
        return PlainClient(security.username, security.password)
    assert mechanism is not None
    return ScramClient(mechanism, security.username, security.password)


def _fields(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and len(key) == 1:
            out.setdefault(key, value)
    return out
