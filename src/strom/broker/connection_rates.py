"""Kafka's connection creation rate quotas (``ConnectionQuotas``, KIP-402 / KIP-612).

Three kinds of meter, each Kafka's ``Rate`` (:class:`~strom.broker.quotas.rate.SampledRate`)
over ``quota.window.num`` windows of ``quota.window.size.seconds``:

* broker-wide, bound ``max.connection.creation.rate`` (dynamic);
* per listener, bound ``listener.name.<l>.max.connection.creation.rate`` (else unbounded);
* per IP address, bound the ``connection_creation_rate`` of the ``ip`` client-quota entity
  naming the address, else of the default ``ip`` entity (AlterClientQuotas;
  ``kafka-configs --entity-type ips``), else unbounded.

What a connection over a bound meets, as in Kafka's ``Acceptor``:

1. :meth:`ConnectionRates.accept_delay` records the accepted connection in the broker and
   listener meters; over either bound, the listener's acceptor waits the throttle time
   (Kafka's ``(rate - bound) / bound * window span``, at most one window) before it accepts
   anything more — the connection just accepted waits with it, later ones in the kernel's
   backlog. The inter-broker listener is not metered broker-wide when it is a listener of its
   own (only by its listener bound), so brokers keep reaching each other.
2. :meth:`ConnectionRates.ip_throttle` records it in its address's meter; over the bound the
   connection is not served: it is held open, unread, for the throttle time and then closed
   (Kafka's delayed close: the client does not retry at once), and un-recorded from its
   address's, listener's and the broker's meters.

Memory: an address has a meter only while a bound applies to it, and at most
:data:`MAX_IP_METERS` are kept (the least recently used are dropped; Kafka expires an
address's sensor after an hour unused). Bounds are read at each connection (the config's) or
taken from every metadata image (:meth:`configure`), so changes apply at once. Addresses are
compared as IP addresses (``::ffff:10.0.0.1`` is ``10.0.0.1``). Owned by the event-loop
thread.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping

from strom.broker.quotas.rate import SampledRate
from strom.common.config import BrokerConfig
from strom.metadata.image import MetadataImage, QuotaEntity

log = logging.getLogger("strom.broker.network")

IP_ENTITY = "ip"
IP_QUOTA_KEY = "connection_creation_rate"
UNLIMITED = 2147483647  # Kafka's default of every bound here: no quota
MAX_IP_METERS = 10_000

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_ip(text: str) -> IpAddress | None:
    """An address as connections are compared (IPv4-mapped IPv6 as IPv4); None when ``text``
    is not an IP address."""
    try:
        address = ipaddress.ip_address(text.partition("%")[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def ip_quotas(quotas: Mapping[QuotaEntity, Mapping[str, float]]
              ) -> tuple[dict[IpAddress, int], int]:
    """(bound per address, default bound) of the ``ip`` entities among client quotas."""
    per_ip: dict[IpAddress, int] = {}
    default = UNLIMITED
    for entity, values in quotas.items():
        if len(entity) != 1 or entity[0][0] != IP_ENTITY or IP_QUOTA_KEY not in values:
            continue
        name, bound = entity[0][1], int(values[IP_QUOTA_KEY])
        if name is None:
            default = bound
        elif (address := parse_ip(name)) is not None:
            per_ip[address] = bound
    return per_ip, default


class ConnectionRates:
    """The meters and bounds above; see the module doc."""

    def __init__(self, config: Callable[[], BrokerConfig | None],
                 clock: Callable[[], float] = time.monotonic, samples: int = 11,
                 window_s: float = 1.0) -> None:
        self._config = config
        self._clock = clock
        self._samples = samples
        self._window = window_s
        #: The inter-broker listener's name when it is a listener of its own.
        self.protected: str | None = None
        self._broker = self._meter()
        self._listeners: dict[str, SampledRate] = {}
        self._ips: OrderedDict[IpAddress, SampledRate] = OrderedDict()
        self._per_ip: dict[IpAddress, int] = {}
        self._default_ip = UNLIMITED
        self._quotas: Mapping[QuotaEntity, Mapping[str, float]] | None = None
        # The bounds (broker, listener) of the config last read, per listener: reading them
        # costs more than the rest of a connection's checks.
        self._bounds_of: BrokerConfig | None = None
        self._bounds: dict[str, tuple[int, int]] = {}
        #: Per listener: (broker, listener) meters the last connection was recorded in.
        self._recorded: dict[str, tuple[bool, bool]] = {}

    def _meter(self) -> SampledRate:
        return SampledRate(self._clock(), self._samples, self._window)

    def configure(self, image: MetadataImage) -> None:
        """Take the ``ip`` quotas of ``image`` (a metadata-store subscriber)."""
        if image.client_quotas is self._quotas:
            return
        self._quotas = image.client_quotas
        per_ip, default = ip_quotas(image.client_quotas)
        if (per_ip, default) != (self._per_ip, self._default_ip):
            self._per_ip, self._default_ip = per_ip, default
            log.info("connection creation rate quotas per IP: %s, default %s",
                     {str(a): b for a, b in per_ip.items()} or "none",
                     "none" if default == UNLIMITED else default)

    def ip_bound(self, address: IpAddress) -> int:
        return self._per_ip.get(address, self._default_ip)

    def _throttle(self, meter: SampledRate, bound: int, now: float) -> float:
        meter.record(1.0, now)
        return min(meter.throttle_s(bound, now), self._window)

    def _bounds_for(self, listener: str) -> tuple[int, int]:
        config = self._config()
        if config is None:
            return UNLIMITED, UNLIMITED
        if config is not self._bounds_of:
            self._bounds_of, self._bounds = config, {}
        bounds = self._bounds.get(listener)
        if bounds is None:
            # Kafka's listener bound: the listener's own value, else the broker-wide one
            # (which bounds the protected listener's connections, metered on their own).
            bounds = self._bounds[listener] = (
                UNLIMITED if listener == self.protected
                else int(config.get("max.connection.creation.rate")),
                int(config.for_listener(listener, "max.connection.creation.rate")))
        return bounds

    def accept_delay(self, listener: str) -> float:
        """Record a connection accepted on ``listener``; how long the acceptor waits (0: not
        at all) for the broker's and the listener's rates to come back to their bounds.
        Unbounded meters record nothing (a bound set later starts from an empty meter)."""
        broker_bound, listener_bound = self._bounds_for(listener)
        by_broker, by_listener = broker_bound < UNLIMITED, listener_bound < UNLIMITED
        self._recorded[listener] = (by_broker, by_listener)
        if not (by_broker or by_listener):
            return 0.0
        now = self._clock()
        delay = self._throttle(self._broker, broker_bound, now) if by_broker else 0.0
        if by_listener:
            meter = self._listeners.get(listener)
            if meter is None:
                meter = self._listeners[listener] = self._meter()
            delay = max(delay, self._throttle(meter, listener_bound, now))
        return delay

    def ip_throttle(self, listener: str, ip: str) -> float:
        """Record a connection from ``ip``; over its bound, the seconds to hold it before
        closing it unserved (it is then un-recorded everywhere), else 0."""
        if not self._per_ip and self._default_ip >= UNLIMITED:
            return 0.0  # no ip quota at all
        address = parse_ip(ip)
        if address is None:
            return 0.0
        bound = self.ip_bound(address)
        if bound >= UNLIMITED:
            return 0.0
        now = self._clock()
        meter = self._ips.get(address)
        if meter is None:
            if len(self._ips) >= MAX_IP_METERS:
                self._ips.popitem(last=False)
            meter = self._ips[address] = self._meter()
        else:
            self._ips.move_to_end(address)
        throttle = self._throttle(meter, bound, now)
        if throttle > 0:
            meter.record(-1.0, now)
            by_broker, by_listener = self._recorded.get(listener, (False, False))
            if by_broker:
                self._broker.record(-1.0, now)
            if by_listener:
                self._listeners[listener].record(-1.0, now)
        return throttle
