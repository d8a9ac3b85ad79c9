"""How this broker connects to brokers as a client (transaction markers): the security of
the inter-broker listener, as Kafka's broker-side client takes it.

The inter-broker listener (``inter.broker.listener.name``, else the listener of
``security.inter.broker.protocol``) decides the protocol, and its settings (per listener,
``listener.name.<l>.…`` first) make the client side:

* TLS (SSL, SASL_SSL): the listener's ``ssl.truststore.location`` checks the other broker's
  certificate; its ``ssl.keystore.location`` (with ``ssl.key.password``, else
  ``ssl.keystore.password``) is presented as the client certificate, so a listener with
  ``ssl.client.auth=required`` accepts it; ``ssl.endpoint.identification.algorithm``
  (``https`` by default, empty to turn off) checks the broker's host name.
* SASL (SASL_PLAINTEXT, SASL_SSL): ``sasl.mechanism.inter.broker.protocol`` (PLAIN,
  SCRAM-SHA-256 or SCRAM-SHA-512; it must be enabled on the listener) with the ``username``
  and ``password`` options of the listener's ``sasl.jaas.config`` for that mechanism (Kafka's
  login module options). A SCRAM user must exist (``strom users create``) before markers can
  be written; until then they are retried.

:func:`inter_broker_security` runs before the data directory is touched; any setting the
client side cannot satisfy is an :class:`InterBrokerConfigError` naming the key.
"""

from __future__ import annotations

from strom.broker.security.jaas import JaasConfigError, parse_jaas
from strom.broker.security.listeners import ListenerSet
from strom.broker.security.principal import ANONYMOUS
from strom.client.records import ClientConfigError
from strom.client.security import ClientSecurity, client_context
from strom.common.config import BrokerConfig
from strom.common.errors import StromError

#: Mechanisms the broker can log in with as a client (OAUTHBEARER would need a token source).
CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class InterBrokerConfigError(StromError):
    """The inter-broker listener's security cannot be met by the broker's own client."""


def inter_broker_security(config: BrokerConfig, listeners: ListenerSet) -> ClientSecurity | None:
    """The client security of connections to the inter-broker listener (None: PLAINTEXT)."""
    listener = listeners.named(listeners.inter_broker)
    protocol = listener.protocol
    if not protocol.uses_tls and not protocol.uses_sasl:
        return None
    name = listener.name
    where = f"inter-broker listener {name} ({protocol.value})"
    context = None
    if protocol.uses_tls:
        def get(key: str) -> str | None:
            value = config.for_listener(name, key)
            return None if value is None or value == "" else str(value)

        identification = get("ssl.endpoint.identification.algorithm") or ""
        try:
            context = client_context(
                ca=get("ssl.truststore.location"), key=get("ssl.keystore.location"),
                password=get("ssl.key.password") or get("ssl.keystore.password"),
                check_hostname=identification.lower() not in ("", "none"))
        except ClientConfigError as exc:
            raise InterBrokerConfigError(f"{where}: {exc}") from None
    mechanism = username = password = None
    if protocol.uses_sasl:
        mechanism, username, password = _sasl_login(config, name, where)
    return ClientSecurity(protocol.value, context, mechanism, username, password)


def broker_principal(security: ClientSecurity | None) -> str | None:
    """The principal the broker's own connections get on the inter-broker listener:
    ``User:ANONYMOUS`` on PLAINTEXT, ``User:<username>`` with SASL; None for TLS without
    SASL (its certificate's subject, mapped by the listener's principal rules)."""
    if security is None:
        return ANONYMOUS
    if security.uses_sasl:
        return f"User:{security.username}"
    return None


def _sasl_login(config: BrokerConfig, listener: str, where: str) -> tuple[str, str, str]:
    """(mechanism, username, password) the broker logs in with on ``listener``."""
    mechanism = str(config.get("sasl.mechanism.inter.broker.protocol")).strip().upper()
    if mechanism not in CLIENT_MECHANISMS:
        raise InterBrokerConfigError(
            f"{where}: sasl.mechanism.inter.broker.protocol={mechanism} cannot be used by "
            f"strom's broker-to-broker client; set it to one of {', '.join(CLIENT_MECHANISMS)}")
    enabled = [str(m).upper() for m in
               config.for_listener(listener, "sasl.enabled.mechanisms") or ()]
    if mechanism not in enabled:
        raise InterBrokerConfigError(
            f"{where}: sasl.mechanism.inter.broker.protocol={mechanism} is not in the "
            f"listener's sasl.enabled.mechanisms ({', '.join(enabled) or 'none'})")
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    jaas = config.for_listener(listener, "sasl.jaas.config", mechanism)
    if not jaas:
        raise InterBrokerConfigError(
            f"{where}: no credentials for the broker's own {mechanism} login: set {key} (or "
            'sasl.jaas.config) with username="…" password="…" options')
    try:
        options = parse_jaas(str(jaas), key).options
    except JaasConfigError as exc:
        raise InterBrokerConfigError(f"{where}: {exc}") from None
    username, password = options.get("username"), options.get("password")
    if not username or password is None:
        raise InterBrokerConfigError(
            f"{where}: {key} (or sasl.jaas.config) has no username and password options for "
            f"the broker's own {mechanism} login")
    return mechanism, username, password
