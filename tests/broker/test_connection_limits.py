"""Connection limits (``max.connections.per.ip``, ``max.connections``) and a connection flood
against a real broker: connections beyond the limit are closed at once, idle and stalled ones
within it expire (``connections.max.idle.ms``), and a well-behaved confluent-kafka client that
was connected before the flood keeps being served — its produce and consume latencies during
the flood are printed (and recorded in docs/benchmarks.md), not asserted tightly. Connection
creation rates: ``max.connection.creation.rate`` paces new connections (never refuses them),
an ``ip`` quota closes the connections over it unserved, other addresses unaffected."""

from __future__ import annotations

import socket
import struct
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from strom.testing import EmbeddedBroker
from tests.broker.test_network import is_closed_by_peer


def test_connections_beyond_the_limits_are_closed_and_a_healthy_client_is_served() -> None:
    config = {"max.connections.per.ip": 40, "connections.max.idle.ms": 3000}
    with EmbeddedBroker(config) as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "healthy",
                             "enable.auto.commit": False})
        producer.produce("flood", b"warm-up")
        producer.flush(10)
        consumer.assign([TopicPartition("flood", 0, OFFSET_BEGINNING)])
        assert consumer.poll(10) is not None
        # The flood: idle connections, connections stalled in the middle of a frame, and
        # connections beyond max.connections.per.ip.
        flood: list[socket.socket] = []
        for i in range(120):
            sock = socket.create_connection((broker.host, broker.port))
            if i % 2:
                sock.sendall(struct.pack(">i", 1000) + b"\x00" * 10)  # a partial frame
            flood.append(sock)
        closed_at_once = sum(is_closed_by_peer(s, 0.05) for s in flood[60:])
        produce_ms: list[float] = []  # produce until acknowledged
        consume_ms: list[float] = []  # produce until the consumer has the record
        for i in range(20):
            started = time.monotonic()
            producer.produce("flood", f"m{i}".encode())
            producer.flush(10)
            produce_ms.append((time.monotonic() - started) * 1000)
            msg = consumer.poll(10)
            consume_ms.append((time.monotonic() - started) * 1000)
            assert msg is not None and msg.error() is None and msg.value() == f"m{i}".encode()
        consumer.close()
        expired = sum(is_closed_by_peer(s, 5) for s in flood[:20])
        for sock in flood:
            sock.close()
        produce_ms.sort()
        consume_ms.sort()
        print(f"\nduring a flood of 120 connections (limit 40 per IP): produce p50 "
              f"{produce_ms[10]:.1f} ms max {produce_ms[-1]:.1f} ms; produce-to-consume p50 "
              f"{consume_ms[10]:.1f} ms max {consume_ms[-1]:.1f} ms; "
              f"{closed_at_once}/60 beyond the limit closed at once; {expired}/20 idle or "
              "stalled closed after connections.max.idle.ms")
        assert closed_at_once == 60
        assert expired == 20
        assert max(produce_ms) < 5000 and max(consume_ms) < 5000


def test_max_connections_closes_the_connection_over_the_limit() -> None:
    with EmbeddedBroker({"max.connections": 3}) as broker:
        socks = [socket.create_connection((broker.host, broker.port)) for _ in range(3)]
        extra = socket.create_connection((broker.host, broker.port))
        assert is_closed_by_peer(extra, 2)
        assert not any(is_closed_by_peer(s, 0.1) for s in socks)
        socks[0].close()
        time.sleep(0.2)
        again = socket.create_connection((broker.host, broker.port))
        assert not is_closed_by_peer(again, 0.3)
        for sock in [*socks, extra, again]:
            sock.close()
        assert any("max.connections" in line for line in broker.output)


def test_per_listener_limit_overrides_and_dynamic_update() -> None:
    from tests.broker.raw import RawClient
    from tests.broker.test_dynamic_broker_configs import incremental

    config = {"listeners": "PLAINTEXT://127.0.0.1:0,OTHER://127.0.0.1:0",
              "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
              "listener.name.other.max.connections": 2,
              "max.connections.per.ip": 100}
    with EmbeddedBroker(config) as broker:
        other = broker.listeners["OTHER"]
        kept = [socket.create_connection(other) for _ in range(2)]
        refused = socket.create_connection(other)
        assert is_closed_by_peer(refused, 2)
        plain = [socket.create_connection((broker.host, broker.port)) for _ in range(5)]
        assert not any(is_closed_by_peer(s, 0.1) for s in plain)  # the limit is OTHER's
        # max.connections.per.ip is dynamic, and the overrides exempt an address.
        admin = RawClient(broker.bootstrap)
        assert incremental(admin, "", [("max.connections.per.ip", 0, "9")]).error_code == 0
        extra = [socket.create_connection((broker.host, broker.port)) for _ in range(3)]
        # 2 on OTHER + 5 + the admin connection were open from this address: one more fits
        assert [is_closed_by_peer(s, 0.3) for s in extra] == [False, True, True]
        assert incremental(admin, "", [("max.connections.per.ip.overrides", 0,
                                        "127.0.0.1:20")]).error_code == 0
        more = socket.create_connection((broker.host, broker.port))
        assert not is_closed_by_peer(more, 0.3)
        assert incremental(admin, "", [("max.connections.per.ip.overrides", 0,
                                        "nonsense")]).error_code == 42  # as Kafka: INVALID_REQUEST
        for sock in [*kept, refused, *plain, *extra, more]:
            sock.close()
        admin.close()


def api_versions(sock: socket.socket) -> None:
    header = struct.pack(">hhih", 18, 0, 1, 4) + b"test"
    sock.sendall(struct.pack(">i", len(header)) + header)


def answered(sock: socket.socket, timeout: float) -> bool:
    """Whether the ApiVersions sent on ``sock`` was answered (False: closed unanswered)."""
    sock.settimeout(timeout)
    try:
        return len(sock.recv(4)) == 4
    except OSError:
        return False


def test_connection_creation_rate_paces_new_connections_and_spares_open_ones() -> None:
    # Two 1 s quota windows: the rate is measured over about a second, so the burst a new
    # meter lets through (Kafka's: quota.window.num - 1 windows' worth) is short.
    config = {"max.connection.creation.rate": 20, "quota.window.num": 2,
              "quota.window.size.seconds": 1}
    with EmbeddedBroker(config) as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        producer.produce("paced", b"warm-up")
        assert producer.flush(10) == 0
        started = time.monotonic()
        served = 0
        produce_s: list[float] = []
        for i in range(100):
            with socket.create_connection((broker.host, broker.port)) as sock:
                api_versions(sock)
                served += answered(sock, 10)
            if i % 10 == 0:  # the connected producer is not paced
                sent = time.monotonic()
                producer.produce("paced", b"during")
                assert producer.flush(10) == 0
                produce_s.append(time.monotonic() - sent)
        elapsed = time.monotonic() - started
        print(f"\n100 connections at max.connection.creation.rate=20: {elapsed:.1f} s "
              f"({100 / elapsed:.0f}/s); an open producer's acks meanwhile at most "
              f"{max(produce_s) * 1000:.0f} ms")
        assert served == 100  # paced, never refused
        # About the first 20 pass at once, the other 80 at 20 a second: 4 s. Without the
        # rate they take a fraction of a second.
        assert elapsed > 2.0
        assert max(produce_s) < 5.0


def test_ip_connection_quota_closes_connections_over_it_unserved() -> None:
    from strom.client.quota_admin import QuotaAlteration
    from strom.client.sync import SyncAdminClient

    with EmbeddedBroker({"quota.window.num": 2, "quota.window.size.seconds": 1}) as broker:
        with SyncAdminClient(broker.bootstrap) as admin:
            admin.alter_client_quotas([QuotaAlteration(
                {"ip": "127.0.0.2"}, {"connection_creation_rate": 5.0})])
        flood = []
        for _ in range(30):
            sock = socket.create_connection((broker.host, broker.port),
                                            source_address=("127.0.0.2", 0))
            api_versions(sock)
            flood.append(sock)
        results = [answered(s, 5) for s in flood]
        # Another address is not throttled.
        others = []
        for _ in range(10):
            with socket.create_connection((broker.host, broker.port)) as sock:
                api_versions(sock)
                others.append(answered(sock, 5))
        for sock in flood:
            sock.close()
        assert all(others)
        # About five a second are served, the rest closed without an answer.
        assert 1 <= sum(results) <= 15, results
