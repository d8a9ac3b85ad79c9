"""Listeners as Kafka declares them: ``listeners``, ``advertised.listeners``,
``listener.security.protocol.map`` and ``inter.broker.listener.name``.

``listeners=PLAINTEXT://:9092,SSL://0.0.0.0:9093,INTERNAL://127.0.0.1:9094`` declares three
listeners by name; each name's security protocol comes from the protocol map (a name missing
from it is an error, so ``INTERNAL`` needs ``INTERNAL:PLAINTEXT`` there). A bare
``HOST:PORT`` is a PLAINTEXT listener named ``PLAINTEXT`` (strom's ``--listen``). An empty
host listens on every interface. Names are unique and upper case; Kafka's checks apply (an
advertised name must be a listener; the inter-broker name must be one).

Everything here is parsed before the broker touches its data directory, and every problem is
a :class:`ListenerConfigError` with a message naming the key.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from strom.common.config import BrokerConfig
from strom.common.errors import StromError

MAX_PORT = 65535


class ListenerConfigError(StromError):
    """The listener configuration is unusable; the broker must not start."""


class SecurityProtocol(enum.Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


@dataclass(frozen=True, slots=True)
class Listener:
    """One declared listener: where it binds and what it advertises (``advertised_host``
    None: the bound address, known once bound)."""

    name: str
    protocol: SecurityProtocol
    host: str
    port: int
    advertised_host: str | None = None
    advertised_port: int | None = None


@dataclass(frozen=True, slots=True)
class ListenerSet:
    listeners: tuple[Listener, ...]
    inter_broker: str

    def named(self, name: str) -> Listener:
        return next(x for x in self.listeners if x.name == name)


def parse_endpoint(value: str, key: str) -> tuple[str | None, str, int]:
    """``NAME://HOST:PORT`` or ``HOST:PORT`` → (name or None, host, port)."""
    text = value.strip()
    what = {"listeners": "listener", "advertised.listeners": "advertised listener"}.get(key, key)
    name: str | None = None
    if "://" in text:
        name, text = text.split("://", 1)
        name = name.strip().upper()
        if not name:
            raise ListenerConfigError(f"{what} {text!r} has an empty listener name")
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ListenerConfigError(f"{what} {value.strip()!r} is not NAME://HOST:PORT")
    if int(port) > MAX_PORT:
        raise ListenerConfigError(
            f"{what} {value.strip()!r}: port {int(port)} is out of range (0-{MAX_PORT}; 0 picks a "
            "free port)")
    return name, host.strip("[]"), int(port)


def protocol_map(raw: str) -> dict[str, SecurityProtocol]:
    """``NAME:PROTOCOL,…`` → {NAME: protocol}."""
    out: dict[str, SecurityProtocol] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        name, _sep, proto = item.partition(":")
        try:
            out[name.strip().upper()] = SecurityProtocol(proto.strip().upper())
        except ValueError:
            raise ListenerConfigError(
                f"listener.security.protocol.map: {item.strip()!r} is not NAME:PROTOCOL with "
                f"PROTOCOL one of {', '.join(p.value for p in SecurityProtocol)}") from None
    return out


def _endpoints(raw: str, key: str) -> dict[str, tuple[str, int]]:
    out: dict[str, tuple[str, int]] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        name, host, port = parse_endpoint(item, key)
        name = name or SecurityProtocol.PLAINTEXT.value
        if name in out:
            raise ListenerConfigError(f"{key}: listener name {name} is used more than once")
        out[name] = (host, port)
    return out


def parse_listeners(config: BrokerConfig) -> ListenerSet:
    """The broker's listeners from its config, checked as Kafka checks them."""
    declared = _endpoints(str(config.get("listeners") or ""), "listeners")
    if not declared:
        raise ListenerConfigError("listeners: no listener is declared")
    protocols = protocol_map(str(config.get("listener.security.protocol.map")))
    advertised_raw = config.get("advertised.listeners")
    advertised = _endpoints(str(advertised_raw), "advertised.listeners") if advertised_raw \
        else {}
    for name in advertised:
        if name not in declared:
            raise ListenerConfigError(
                f"advertised.listeners: {name} is not a listener in listeners")
    ports = [port for _host, port in declared.values() if port]
    if len(ports) != len(set(ports)):
        raise ListenerConfigError("listeners: each listener needs its own port")
    listeners = []
    for name, (host, port) in declared.items():
        protocol = protocols.get(name)
        if protocol is None:
            raise ListenerConfigError(
                f"listeners: no security protocol for listener {name}: add {name}:<PROTOCOL> "
                "to listener.security.protocol.map")
        adv_host, adv_port = advertised.get(name, (None, None))
        listeners.append(Listener(name, protocol, host, port, adv_host, adv_port))
    inter = config.get("inter.broker.listener.name")
    if inter:
        inter = str(inter).upper()
        if inter not in declared:
            raise ListenerConfigError(
                f"inter.broker.listener.name: {inter} is not a listener in listeners")
    else:
        wanted = SecurityProtocol(str(config.get("security.inter.broker.protocol")))
        inter = next((x.name for x in listeners if x.protocol is wanted), None)
        if inter is None:
            if len(listeners) > 1 or wanted is not SecurityProtocol.PLAINTEXT:
                raise ListenerConfigError(
                    f"no {wanted.value} listener for brokers to reach each other: set "
                    "inter.broker.listener.name to one of "
                    f"{', '.join(x.name for x in listeners)}")
            inter = listeners[0].name
    return ListenerSet(tuple(listeners), inter)
