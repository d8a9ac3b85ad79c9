"""Server sides of the SASL mechanisms: PLAIN (RFC 4616) and SCRAM-SHA-256 / -512 (RFC 5802,
RFC 7677), as Kafka's ``PlainSaslServer`` and ``ScramSaslServer`` answer.

A mechanism is a small state machine: :meth:`step` takes the client's next token and returns
the server's, or raises :class:`AuthenticationFailed` with the message the client is sent.
``complete`` says the exchange is over and ``user`` who was authenticated. Messages never say
whether the user or the password was wrong. Each calls its ``admit`` with the user the client
names before it checks any credential (:mod:`strom.broker.security.login_throttle`), which
may refuse the login unchecked (:class:`LoginThrottled`).

SCRAM exchange (no channel binding, as Kafka)::

    client-first  n,[a=authzid],n=<user>,r=<client nonce>[,extensions]
    server-first  r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final  c=<base64 gs2 header>,r=<nonce>,p=<base64 proof>
    server-final  v=<base64 server signature>
"""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets
from collections.abc import Callable, Mapping
from typing import Protocol

from strom.common import scram
from strom.metadata.image import ScramCredential

CredentialLookup = Callable[[str, str], ScramCredential | None]  # (user, mechanism)
#: Called with the user a client names (None: unknown) before its credentials are checked.
Admit = Callable[[str | None], None]


def admit_all(user: str | None) -> None:
    """No login throttle."""


class AuthenticationFailed(Exception):
    """The client's credentials (or token) were refused; ``str()`` is sent to the client,
    ``detail`` (when given) is what the broker logs instead."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail


class LoginThrottled(AuthenticationFailed):
    """Refused without checking the credentials: the address or user is in back-off after
    failed logins. Not a failure of its own."""


class MechanismServer(Protocol):
    """``expires_ms``: when the credential used expires (ms since the epoch), None if never;
    it bounds the session's lifetime (KIP-368)."""

    complete: bool
    user: str | None
    expires_ms: int | None

    def step(self, token: bytes) -> bytes: ...


class PlainServer:
    """PLAIN: one token ``[authzid] NUL user NUL password``, checked against the listener's
    JAAS users."""

    def __init__(self, users: Mapping[str, str], admit: Admit = admit_all) -> None:
        self._users = users
        self._admit = admit
        self.complete = False
        self.user: str | None = None
        self.expires_ms: int | None = None

    def step(self, token: bytes) -> bytes:
        if self.complete:
            raise AuthenticationFailed("Authentication failed: PLAIN exchange already complete")
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailed("Authentication failed: Invalid SASL/PLAIN response: "
                                       "expected 3 tokens")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed(
                "Authentication failed: Invalid SASL/PLAIN response") from None
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        self._admit(user)
        expected = self._users.get(user)
        # Compare even for an unknown user, so timing does not reveal which users exist.
        good = hmac.compare_digest((expected or "\x00" + password).encode(),
                                   password.encode())
        if expected is None or not good:
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: Client requested an "
                                       "authorization id that is different from username")
        self.complete, self.user = True, user
        return b""


class ScramServer:
    """SCRAM-SHA-256 / SCRAM-SHA-512 against the credentials in the metadata store."""

    def __init__(self, mechanism: str, credentials: CredentialLookup,
                 admit: Admit = admit_all) -> None:
        self._mechanism = mechanism
        self._credentials = credentials
        self._admit = admit
        self._failure = ("Authentication failed during authentication due to invalid "
                         f"credentials with SASL mechanism {mechanism}")
        self._first_bare = ""
        self._server_first = ""
        self._gs2_header = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self._user = ""
        self.complete = False
        self.user: str | None = None
        self.expires_ms: int | None = None

    def step(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed(self._failure) from None
        if self.complete:
            raise AuthenticationFailed(self._failure)
        if not self._server_first:
            return self._client_first(text).encode()
        return self._client_final(text).encode()

    def _client_first(self, text: str) -> str:
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y"):
            raise AuthenticationFailed(
                "Authentication failed: Invalid SCRAM client first message" if not
                parts[0].startswith("p") else
                "Authentication failed: channel binding is not supported")
        authzid = parts[1][2:] if parts[1].startswith("a=") else ""
        bare = parts[2]
        fields = _fields(bare)
        user, client_nonce = fields.get("n"), fields.get("r")
        if user is None or not client_nonce:
            raise AuthenticationFailed("Authentication failed: Invalid SCRAM client first "
                                       "message")
        user = _unescape(user)
        if authzid and _unescape(authzid) != user:
            raise AuthenticationFailed("Authentication failed: Client requested an "
                                       "authorization id that is different from username")
        self._admit(user)
        credential = self._credentials(user, self._mechanism)
        if credential is None:
            raise AuthenticationFailed(self._failure)
        self._gs2_header = f"{parts[0]},{parts[1]},"
        self._first_bare = bare
        self._credential, self._user = credential, user
        self._nonce = client_nonce + secrets.token_urlsafe(24).replace("-", "A")
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first

    def _client_final(self, text: str) -> str:
        credential = self._credential
        assert credential is not None
        without_proof, sep, proof_field = text.rpartition(",p=")
        fields = _fields(without_proof)
        try:
            binding = base64.b64decode(fields.get("c", ""), validate=True).decode()
            proof = base64.b64decode(proof_field, validate=True)
        except (binascii.Error, ValueError):
            raise AuthenticationFailed(self._failure) from None
        if not sep or binding != self._gs2_header or fields.get("r") != self._nonce:
            raise AuthenticationFailed(self._failure)
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        mech = self._mechanism
        signature = scram.hmac_digest(mech, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthenticationFailed(self._failure)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(scram.digest(mech, client_key), credential.stored_key):
            raise AuthenticationFailed(self._failure)
        server_signature = scram.hmac_digest(mech, credential.server_key, auth_message)
        self.complete, self.user = True, self._user
        return "v=" + base64.b64encode(server_signature).decode()


def _fields(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and len(key) == 1 and key not in out:
            out[key] = value
    return out


def _unescape(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")
