"""SASL on a listener: the per-listener settings and the per-connection session.

Kafka's ``SaslServerAuthenticator`` rules. On a SASL listener a connection starts
unauthenticated: only ApiVersions, SaslHandshake and SaslAuthenticate are served (anything
else closes the connection, as Kafka does). SaslHandshake picks an enabled mechanism (an
other one: UNSUPPORTED_SASL_MECHANISM with the enabled list, then the connection closes).
After a v1 handshake the tokens come in SaslAuthenticate requests; after a v0 handshake they
come as raw size-prefixed frames without a request header, and are answered the same way
(the pre-KIP-152 framing older clients use). A failed authentication is answered with
SASL_AUTHENTICATION_FAILED and its message (v0: no answer) after
``connection.failed.authentication.delay.ms``, logged, and the connection closed. Failures
are counted per client address and user, and an address or user that keeps failing has its
logins refused unchecked for a growing back-off
(:mod:`strom.broker.security.login_throttle`).

Re-authentication (KIP-368, Kafka's ``SaslServerAuthenticator.ReauthInfo``): a session has a
lifetime when ``connections.max.reauth.ms`` (per listener and mechanism) is set or its
credential expires (an OAUTHBEARER token's ``exp``): the earlier of the two, sent to the
client in SaslAuthenticate v1+ as ``session_lifetime_ms``. Only such a session may
re-authenticate: a SaslHandshake on the authenticated connection (at most one a second)
starts the exchange again with the same mechanism (another one is refused at its
SaslAuthenticate) and the same principal (another one is refused); until it completes
nothing else is served, and a failure closes the connection. A session past its lifetime
closes the connection at its next request other than that SaslHandshake.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from strom.broker.security.jaas import JaasConfigError, parse_jaas
from strom.broker.security.jwt_validator import (
    ClaimRules,
    JwtValidator,
    OAuthConfigError,
    jwt_validator,
)
from strom.broker.security.listeners import Listener
from strom.broker.security.login_throttle import LoginGate, LoginThrottle
from strom.broker.security.mechanisms import (
    Admit,
    AuthenticationFailed,
    CredentialLookup,
    LoginThrottled,
    MechanismServer,
    PlainServer,
    ScramServer,
    admit_all,
)
from strom.broker.security.oauthbearer import OAuthBearerServer
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
    oauth: JwtValidator | None = None
    reauth_ms: Mapping[str, int] = field(default_factory=dict)  # mechanism → ms (0: none)
    #: The broker's failed-login throttle (shared by its SASL listeners); None: off.
    throttle: LoginThrottle | None = None

    def server(self, mechanism: str, admit: Admit = admit_all) -> MechanismServer:
        if mechanism == "PLAIN":
            return PlainServer(self.plain_users, admit)
        if mechanism == "OAUTHBEARER":
            assert self.oauth is not None
            return OAuthBearerServer(self.oauth, admit)
        return ScramServer(mechanism, self.credentials, admit)


def sasl_settings(config: BrokerConfig, listener: Listener, credentials: CredentialLookup,
                  throttle: LoginThrottle | None = None) -> SaslSettings:
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
    oauth = _oauth_validator(config, name) if "OAUTHBEARER" in mechanisms else None
    reauth = {m: int(config.for_listener(name, "connections.max.reauth.ms", m))
              for m in mechanisms}
    return SaslSettings(name, mechanisms, users, delay, credentials, oauth, reauth, throttle)


def _oauth_validator(config: BrokerConfig, listener: str) -> JwtValidator:
    def get(key: str) -> object:
        return config.for_listener(listener, f"sasl.oauthbearer.{key}", "OAUTHBEARER")

    audience = get("expected.audience")
    rules = ClaimRules(
        audience=frozenset(str(a) for a in audience) if isinstance(audience, list)
        else frozenset(),
        issuer=None if get("expected.issuer") is None else str(get("expected.issuer")),
        sub_claim=str(get("sub.claim.name")), scope_claim=str(get("scope.claim.name")),
        skew_s=int(str(get("clock.skew.seconds"))))
    jwks, pem = get("jwks.endpoint.url"), get("public.keys.location")
    try:
        return jwt_validator(None if jwks is None else str(jwks),
                             None if pem is None else str(pem), rules,
                             bool(get("unsecured.tokens.allowed")))
    except OAuthConfigError as exc:
        raise SaslConfigError(f"SASL listener {listener}: {exc}") from None


class SaslState(enum.Enum):
    HANDSHAKE = "handshake"  # waiting for SaslHandshake (ApiVersions allowed)
    AUTHENTICATING = "authenticating"  # mechanism chosen; tokens expected
    AUTHENTICATED = "authenticated"
    FAILED = "failed"  # the connection is closing


class SaslSession:
    """One connection's SASL exchange and re-authentications. Owned by the connection
    (event-loop thread). ``clock`` is monotonic seconds, ``wall`` epoch seconds."""

    REAUTH_MIN_INTERVAL_S = 1.0

    def __init__(self, settings: SaslSettings, peer: str,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.peer = peer
        self.state = SaslState.HANDSHAKE
        self.raw_tokens = False
        self.mechanism: str | None = None
        self._server: MechanismServer | None = None
        self.user: str | None = None
        self.session_lifetime_ms = 0  # of the last completed authentication; 0: unlimited
        self._expires_at: float | None = None  # monotonic deadline of the session
        self._reauth_started: float | None = None
        self._reauthenticating = False
        self._bad_mechanism: str | None = None
        self._clock, self._wall = clock, wall
        self._gate: LoginGate | None = None

    @property
    def authenticated(self) -> bool:
        return self.state is SaslState.AUTHENTICATED

    @property
    def reauthenticating(self) -> bool:
        return self._reauthenticating

    def expired(self) -> bool:
        """True once an authenticated session is past its lifetime."""
        return (self.authenticated and self._expires_at is not None
                and self._clock() >= self._expires_at)

    def begin_reauthentication(self) -> bool:
        """Start re-authenticating an authenticated session (a SaslHandshake arrived). False
        (nothing changes) when the session has no lifetime or the last re-authentication
        began less than a second ago: the handshake is then answered ILLEGAL_SASL_STATE."""
        now = self._clock()
        if not self.authenticated or self._expires_at is None or (
                self._reauth_started is not None
                and now - self._reauth_started < self.REAUTH_MIN_INTERVAL_S):
            return False
        self._reauth_started = now
        self._reauthenticating = True
        self.state = SaslState.HANDSHAKE
        return True

    def handshake(self, mechanism: str, version: int) -> bool:
        """Choose ``mechanism``; False when it is not enabled (the state becomes FAILED)."""
        if mechanism not in self.settings.mechanisms:
            self.state = SaslState.FAILED
            _failures.log("Failed authentication with %s (listener %s): unsupported SASL "
                          "mechanism %s", self.peer, self.settings.listener, mechanism)
            return False
        if self._reauthenticating and mechanism != self.mechanism:
            # Kafka answers the handshake, then refuses the first token.
            self._bad_mechanism = (f"SASL mechanism '{mechanism}' requested by client is not "
                                   "supported for re-authentication of mechanism "
                                   f"'{self.mechanism}'")
        else:
            self.mechanism = mechanism
            throttle = self.settings.throttle
            self._gate = None if throttle is None else throttle.gate(
                self.peer.rpartition(":")[0] or self.peer)
            self._server = self.settings.server(
                mechanism, admit_all if self._gate is None else self._gate.admit)
        self.raw_tokens = version == 0
        self.state = SaslState.AUTHENTICATING
        return True

    def authenticate(self, token: bytes) -> bytes:
        """The server's answer to the client's next token; AuthenticationFailed (state
        FAILED, logged) when refused. AUTHENTICATED once the mechanism completes."""
        server = self._server
        assert server is not None and self.state is SaslState.AUTHENTICATING
        try:
            if self._bad_mechanism is not None:
                raise AuthenticationFailed(self._bad_mechanism)
            answer = server.step(token)
            if server.complete and self._reauthenticating and server.user != self.user:
                raise AuthenticationFailed(
                    f"Cannot change principals during re-authentication from User.{self.user}"
                    f": User.{server.user}")
        except AuthenticationFailed as exc:
            self.state = SaslState.FAILED
            if self._gate is not None and not isinstance(exc, LoginThrottled):
                self._gate.failed()
            what = "re-authentication" if self._reauthenticating else "authentication"
            _failures.log("Failed %s with %s (listener %s, %s): %s", what, self.peer,
                          self.settings.listener, self.mechanism, exc.detail or exc)
            raise
        if server.complete:
            if self._gate is not None:
                self._gate.succeeded()
            self._complete(server)
        return answer

    def _complete(self, server: MechanismServer) -> None:
        assert self.mechanism is not None
        self.state, self.user = SaslState.AUTHENTICATED, server.user
        self.raw_tokens = False
        reauth_ms = self.settings.reauth_ms.get(self.mechanism, 0)
        lifetimes = [reauth_ms] if reauth_ms > 0 else []
        if server.expires_ms is not None:
            lifetimes.append(max(0, server.expires_ms - int(self._wall() * 1000)))
        self.session_lifetime_ms = min(lifetimes) if lifetimes else 0
        self._expires_at = (self._clock() + self.session_lifetime_ms / 1000.0
                            if lifetimes else None)
        log.debug("%s %sauthenticated as User:%s with %s on %s (session lifetime %s ms)",
                  self.peer, "re-" if self._reauthenticating else "", server.user,
                  self.mechanism, self.settings.listener, self.session_lifetime_ms)
        self._reauthenticating = False
