"""SASL on a listener: the per-listener settings and the per-connection session.

Kafka's ``SaslServerAuthenticator`` rules. On a SASL listener a connection starts
unauthenticated: only ApiVersions, SaslHandshake and SaslAuthenticate are served (anything
else closes the connection, as Kafka does). SaslHandshake picks an enabled mechanism (an
other one: UNSUPPORTED_SASL_MECHANISM with the enabled list, then the connection closes).
After a v1 handshake the tokens come in SaslAuthenticate requests; after a v0 handshake they
come as raw size-prefixed frames without a request header, and are answered the same way
(the pre-KIP-152 framing older clients use). A failed authentication is answered with
SASL_AUTHENTICATION_FAILED and its message (v0: no answer) after
``connection.failed.authentication.delay.ms``, logged, and the connection closed.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from strom.broker.security.jaas import JaasConfigError, parse_jaas
from strom.broker.security.listeners import Listener
from strom.broker.security.mechanisms import (
    AuthenticationFailed,
    CredentialLookup,
    MechanismServer,
    PlainServer,
    ScramServer,
)
from strom.common.config import BrokerConfig
from strom.common.errors import StromError
from strom.common.rate_limited_log import RateLimitedLog

log = logging.getLogger("strom.broker.security")
_failures = RateLimitedLog(log, logging.INFO)


class SaslConfigError(StromError):
    """A SASL listener cannot be set up; the broker must not start."""


@dataclass(frozen=True, slots=True)
class SaslSettings:
    """What one SASL listener offers; shared by its connections."""

    listener: str
    mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str]
    failure_delay_s: float
    credentials: CredentialLookup

    def server(self, mechanism: str) -> MechanismServer:
        if mechanism == "PLAIN":
            return PlainServer(self.plain_users)
        return ScramServer(mechanism, self.credentials)


def sasl_settings(config: BrokerConfig, listener: Listener,
                  credentials: CredentialLookup) -> SaslSettings:
    """The listener's settings, checked: PLAIN needs a JAAS config with users (per listener
    and mechanism, else ``sasl.jaas.config``)."""
    name = listener.name
    mechanisms = tuple(str(m) for m in config.for_listener(name, "sasl.enabled.mechanisms"))
    if not mechanisms:
        raise SaslConfigError(f"SASL listener {name}: sasl.enabled.mechanisms is empty")
    users: dict[str, str] = {}
    if "PLAIN" in mechanisms:
        jaas = config.for_listener(name, "sasl.jaas.config", "PLAIN")
        key = f"listener.name.{name.lower()}.plain.sasl.jaas.config"
        if not jaas:
            raise SaslConfigError(
                f"SASL listener {name} enables PLAIN but has no users: set {key} (or "
                "sasl.jaas.config) to PlainLoginModule with user_<name>=\"<password>\" options")
        try:
            users = parse_jaas(str(jaas), key).users()
        except JaasConfigError as exc:
            raise SaslConfigError(f"SASL listener {name}: {exc}") from None
        if not users:
            raise SaslConfigError(f"SASL listener {name}: {key} defines no user_<name> entry")
    delay = int(config.get("connection.failed.authentication.delay.ms")) / 1000.0
    return SaslSettings(name, mechanisms, users, delay, credentials)


class SaslState(enum.Enum):
    HANDSHAKE = "handshake"  # waiting for SaslHandshake (ApiVersions allowed)
    AUTHENTICATING = "authenticating"  # mechanism chosen; tokens expected
    AUTHENTICATED = "authenticated"
    FAILED = "failed"  # the connection is closing


class SaslSession:
    """One connection's SASL exchange. Owned by the connection (event-loop thread)."""

    def __init__(self, settings: SaslSettings, peer: str) -> None:
        self.settings = settings
        self.peer = peer
        self.state = SaslState.HANDSHAKE
        self.raw_tokens = False
        self.mechanism: str | None = None
        self._server: MechanismServer | None = None
        self.user: str | None = None

    @property
    def authenticated(self) -> bool:
        return self.state is SaslState.AUTHENTICATED

    def handshake(self, mechanism: str, version: int) -> bool:
        """Choose ``mechanism``; False when it is not enabled (the state becomes FAILED)."""
        if mechanism not in self.settings.mechanisms:
            self.state = SaslState.FAILED
            _failures.log("Failed authentication with %s (listener %s): unsupported SASL "
                          "mechanism %s", self.peer, self.settings.listener, mechanism)
            return False
        self.mechanism = mechanism
        self._server = self.settings.server(mechanism)
        self.raw_tokens = version == 0
        self.state = SaslState.AUTHENTICATING
        return True

    def authenticate(self, token: bytes) -> bytes:
        """The server's answer to the client's next token; AuthenticationFailed (state
        FAILED, logged) when refused. AUTHENTICATED once the mechanism completes."""
        server = self._server
        assert server is not None and self.state is SaslState.AUTHENTICATING
        try:
            answer = server.step(token)
        except AuthenticationFailed as exc:
            self.state = SaslState.FAILED
            _failures.log("Failed authentication with %s (listener %s, %s): %s", self.peer,
                          self.settings.listener, self.mechanism, exc)
            raise
        if server.complete:
            self.state, self.user = SaslState.AUTHENTICATED, server.user
            self.raw_tokens = False
            log.debug("%s authenticated as User:%s with %s on %s", self.peer, server.user,
                      self.mechanism, self.settings.listener)
        return answer
