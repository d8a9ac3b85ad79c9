"""Kafka's connection limits (``ConnectionQuotas``): ``max.connections`` broker-wide and per
listener (``listener.name.<l>.max.connections``), ``max.connections.per.ip`` and
``max.connections.per.ip.overrides`` (``host:count,…``; a host is an IP address).

A new connection beyond a limit is closed at once, before anything is read, and logged
rate-limited (Kafka closes it too; Kafka's acceptor additionally waits for a free slot
under ``max.connections`` instead of closing — strom closes, so a flood never blocks the
accept loop). The inter-broker listener is not subject to ``max.connections``, as in Kafka,
when it is a listener of its own (with a single listener for clients and brokers alike, the
limit applies to it: Kafka's rule would make it apply to nothing).
Limits are read from the current config at each accept, so AlterConfigs changes them at
once. Owned by the event-loop thread.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from strom.common.config import BrokerConfig

UNLIMITED = 2147483647


def parse_overrides(text: str) -> dict[str, int]:
    """``host:count,host:count`` → {host: count}; ValueError when malformed (the config
    key's validator refuses such a value when it is set)."""
    out: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, _, count = item.rpartition(":")
        if not host or not count.isdigit():
            raise ValueError(f"malformed max.connections.per.ip.overrides entry {item!r}")
        out[host] = int(count)
    return out


class ConnectionLimits:
    """Counts open connections by listener and IP address; decides whether one more fits."""

    def __init__(self, config: Callable[[], BrokerConfig | None],
                 inter_broker_listener: str | None = None) -> None:
        self._config = config
        #: The inter-broker listener's name (set by the server once listeners are parsed).
        self.inter_broker = inter_broker_listener
        self._total = 0
        self._by_listener: Counter[str] = Counter()
        self._by_ip: Counter[str] = Counter()

    def refusal(self, listener: str | None, ip: str) -> str | None:
        """Why a new connection from ``ip`` on ``listener`` is refused; None: accept it."""
        config = self._config()
        if config is None:
            return None
        per_ip = int(config.get("max.connections.per.ip"))
        overrides = str(config.get("max.connections.per.ip.overrides") or "")
        if overrides:  # validated when set, so it parses
            per_ip = parse_overrides(overrides).get(ip, per_ip)
        if self._by_ip[ip] >= per_ip:
            return f"{ip} already has {self._by_ip[ip]} connections (max.connections.per.ip)"
        if listener is not None and listener == self.inter_broker:
            return None
        if self._total >= int(config.get("max.connections")):
            return f"the broker has {self._total} connections (max.connections)"
        if listener is not None:
            limit = int(config.for_listener(listener, "max.connections"))
            if self._by_listener[listener] >= limit:
                return (f"listener {listener} has {self._by_listener[listener]} connections "
                        f"(listener.name.{listener.lower()}.max.connections)")
        return None

    def opened(self, listener: str | None, ip: str) -> None:
        self._total += 1
        self._by_ip[ip] += 1
        if listener is not None:
            self._by_listener[listener] += 1

    def closed(self, listener: str | None, ip: str) -> None:
        self._total -= 1
        self._by_ip[ip] -= 1
        if not self._by_ip[ip]:
            del self._by_ip[ip]
        if listener is not None:
            self._by_listener[listener] -= 1
