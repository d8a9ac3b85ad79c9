"""What each listener needs at run time, built (and checked) once at start-up: its TLS
context (which then follows certificate changes: :mod:`strom.broker.security.tls_reload`),
its principal mapping rules and its SASL settings. Any problem raises a
:class:`~strom.common.errors.StromError` subclass naming the listener and the key, before the
broker binds a socket."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

from strom.broker.security.listeners import Listener, ListenerSet, SecurityProtocol
from strom.broker.security.login_throttle import LoginThrottle
from strom.broker.security.mechanisms import CredentialLookup
from strom.broker.security.principal import ANONYMOUS, PrincipalMapper, PrincipalRulesError
from strom.broker.security.sasl import SaslConfigError, SaslSession, SaslSettings, sasl_settings
from strom.broker.security.tls import server_context
from strom.broker.security.tls_reload import ReloadingContext
from strom.common.config import BrokerConfig


@dataclass(frozen=True, slots=True)
class ListenerRuntime:
    listener: Listener
    ssl_context: ssl.SSLContext | None
    principals: PrincipalMapper | None
    sasl: SaslSettings | None

    @property
    def name(self) -> str:
        return self.listener.name

    @property
    def protocol(self) -> SecurityProtocol:
        return self.listener.protocol

    def principal(self, peercert: dict[str, Any] | None) -> str:
        """The principal of a new connection before SASL (TLS: from its certificate)."""
        if self.principals is None:
            return ANONYMOUS
        return self.principals.principal(peercert)

    def sasl_session(self, peer: str) -> SaslSession | None:
        return None if self.sasl is None else SaslSession(self.sasl, peer)


def build_runtimes(config: BrokerConfig, listeners: ListenerSet,
                   credentials: CredentialLookup) -> list[ListenerRuntime]:
    out = []
    throttle = LoginThrottle.from_config(config)  # one for all SASL listeners
    for listener in listeners.listeners:
        context = mapper = None
        if listener.protocol.uses_tls:
            context = _reloading_context(config, listener)
            rules = str(config.for_listener(listener.name, "ssl.principal.mapping.rules"))
            try:
                mapper = PrincipalMapper(rules)
            except PrincipalRulesError as exc:
                raise SaslConfigError(f"TLS listener {listener.name}: {exc}") from None
        sasl = sasl_settings(config, listener, credentials, throttle) \
            if listener.protocol.uses_sasl else None
        out.append(ListenerRuntime(listener, context, mapper, sasl))
    return out


def _reloading_context(config: BrokerConfig, listener: Listener) -> ssl.SSLContext:
    """The listener's SSL context, which follows changes of its keystore and truststore."""
    files = [str(f) for f in (config.for_listener(listener.name, "ssl.keystore.location"),
                              config.for_listener(listener.name, "ssl.truststore.location"))
             if f]
    return ReloadingContext(lambda: server_context(config, listener), files,
                            listener.name).front
