"""ConnectionRates (Kafka's connection creation rate quotas) on a manual clock: the broker and
listener meters pace the acceptor, the inter-broker listener is spared the broker-wide meter,
an IP over its quota is throttled and un-recorded, ip entities come from the metadata image."""

from __future__ import annotations

import dataclasses
import ipaddress

from strom.broker.connection_rates import (
    MAX_IP_METERS,
    UNLIMITED,
    ConnectionRates,
    ip_quotas,
    parse_ip,
)
from strom.common.config import BrokerConfig
from strom.metadata.image import MetadataImage


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def rates(config: dict[str, object], clock: Clock) -> ConnectionRates:
    # Two 1 s windows: a rate is measured over at least one second.
    return ConnectionRates(lambda: BrokerConfig(config), clock, samples=2, window_s=1.0)


def test_the_broker_rate_paces_accepts_by_at_most_one_window() -> None:
    clock = Clock()
    meter = rates({"max.connection.creation.rate": 10}, clock)
    delays = [meter.accept_delay("PLAINTEXT") for _ in range(10)]
    assert delays == [0.0] * 10  # 10 in the first second: at the bound
    over = meter.accept_delay("PLAINTEXT")
    assert 0 < over <= 1.0
    assert max(meter.accept_delay("PLAINTEXT") for _ in range(1000)) == 1.0  # capped
    clock.now += 250.0  # the windows expire: a new burst is accepted
    assert meter.accept_delay("PLAINTEXT") == 0.0


def test_unlimited_by_default_and_per_listener_bounds() -> None:
    clock = Clock()
    free = rates({}, clock)
    assert all(free.accept_delay("PLAINTEXT") == 0 for _ in range(10_000))
    per_listener = rates({"listener.name.other.max.connection.creation.rate": 5}, clock)
    assert all(per_listener.accept_delay("PLAINTEXT") == 0 for _ in range(100))
    assert [per_listener.accept_delay("OTHER") > 0 for _ in range(6)] == [False] * 5 + [True]


def test_the_inter_broker_listener_is_spared_the_broker_wide_meter() -> None:
    clock = Clock()
    meter = rates({"max.connection.creation.rate": 5}, clock)
    meter.protected = "INTERNAL"
    for _ in range(5):
        assert meter.accept_delay("CLIENTS") == 0
    assert meter.accept_delay("CLIENTS") > 0  # clients used the broker-wide bound up
    # The inter-broker listener is metered on its own (with the broker-wide bound, as
    # Kafka's listener quota falls back to it).
    assert [meter.accept_delay("INTERNAL") > 0 for _ in range(6)] == [False] * 5 + [True]


def image_with(quotas: dict[tuple[tuple[str, str | None], ...], dict[str, float]]
               ) -> MetadataImage:
    return dataclasses.replace(MetadataImage("c", 1, 0, {}, {}), client_quotas=quotas)


def test_ip_quotas_throttle_only_that_address_and_unrecord_the_refused() -> None:
    clock = Clock()
    meter = rates({"max.connection.creation.rate": 100}, clock)
    meter.configure(image_with({
        (("ip", "10.0.0.1"),): {"connection_creation_rate": 3.0},
        (("user", "alice"),): {"producer_byte_rate": 1024.0},
    }))
    assert [meter.ip_throttle("PLAINTEXT", "10.0.0.1") > 0 for _ in range(4)] == [
        False, False, False, True]
    assert meter.ip_throttle("PLAINTEXT", "::ffff:10.0.0.1") > 0  # the same address
    assert meter.ip_throttle("PLAINTEXT", "10.0.0.2") == 0  # no quota: not metered
    # The refused ones were un-recorded: once the window passes, the address gets its bound.
    clock.now += 1.5
    assert meter.ip_throttle("PLAINTEXT", "10.0.0.1") == 0


def test_the_default_ip_entity_applies_to_every_other_address() -> None:
    clock = Clock()
    meter = rates({}, clock)
    meter.configure(image_with({(("ip", None),): {"connection_creation_rate": 2.0},
                                (("ip", "10.0.0.9"),): {"connection_creation_rate": 50.0}}))
    assert [meter.ip_throttle("L", "192.168.1.1") > 0 for _ in range(3)] == [False, False, True]
    assert [meter.ip_throttle("L", "192.168.1.2") > 0 for _ in range(3)] == [False, False, True]
    assert not any(meter.ip_throttle("L", "10.0.0.9") > 0 for _ in range(50))
    meter.configure(image_with({}))  # removed: unlimited again
    assert meter.ip_throttle("L", "192.168.1.1") == 0


def test_ip_meters_are_bounded() -> None:
    clock = Clock()
    meter = rates({}, clock)
    meter.configure(image_with({(("ip", None),): {"connection_creation_rate": 1.0}}))
    base = int(ipaddress.ip_address("10.0.0.0"))
    for i in range(MAX_IP_METERS + 50):
        meter.ip_throttle("L", str(ipaddress.ip_address(base + i)))
    assert len(meter._ips) == MAX_IP_METERS  # private: the bound is the point


def test_parsing_ip_entities() -> None:
    assert parse_ip("::ffff:127.0.0.1") == ipaddress.ip_address("127.0.0.1")
    assert parse_ip("fe80::1%eth0") == ipaddress.ip_address("fe80::1")
    assert parse_ip("not-an-ip") is None
    per_ip, default = ip_quotas({(("ip", "::1"),): {"connection_creation_rate": 7.0}})
    assert per_ip == {ipaddress.ip_address("::1"): 7} and default == UNLIMITED
