"""The network layer against hostile clients, over real sockets, with a healthy client beside.

Frames announced but not sent cost nothing; bytes really sent are bounded across connections
(``queued.max.request.bytes``), and stalled frames holding them are closed to serve the others;
stalled and idle connections are closed (``connections.max.idle.ms``); rejections are logged
rate-limited.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.protocol import api
from strom.protocol.versions import ApiKey
from strom.testing import EmbeddedBroker
from strom.testing.cluster import EmbeddedCluster
from tests.broker.raw import RawClient
from tests.broker.test_data_path import batch, create, fetch, produce

MiB = 1024 * 1024


def rss(broker: EmbeddedBroker) -> int:
    """The broker process's resident memory in bytes."""
    assert broker.process is not None
    with open(f"/proc/{broker.process.pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def attacker(broker: EmbeddedBroker, announced: int, payload: int) -> socket.socket:
    """A connection that announces a frame of ``announced`` bytes, sends as much of
    ``payload`` bytes as the broker will take without blocking, then stalls."""
    sock = socket.create_connection((broker.host, broker.port))
    sock.sendall(struct.pack(">i", announced))
    sock.setblocking(False)
    data = memoryview(b"\x00" * payload)
    while data:
        try:
            data = data[sock.send(data):]
        except BlockingIOError:
            break
    return sock


def is_closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_announced_frames_cost_only_the_bytes_sent() -> None:
    with EmbeddedBroker() as broker:
        topic = f"healthy-{uuid.uuid4().hex[:6]}"
        create(RawClient(broker.bootstrap), topic)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])

        def produce_and_consume(count: int) -> None:
            for i in range(count):
                producer.produce(topic, value=b"v%d" % i)
            assert producer.flush(30) == 0
            got = 0
            deadline = time.monotonic() + 30
            while got < count and time.monotonic() < deadline:
                for msg in consumer.consume(num_messages=count, timeout=0.2):
                    assert not msg.error(), msg.error()
                    got += 1
            assert got == count

        try:
            produce_and_consume(100)  # warm up both clients and the broker's paths
            before = rss(broker)
            # 32 clients each announce the largest frame allowed (socket.request.max.bytes,
            # 100 MiB) and send 1,000 bytes of it: 3.2 GB if the broker sized buffers by the
            # announcement.
            attackers = [attacker(broker, 100 * MiB, 1000) for _ in range(32)]
            produce_and_consume(100)
            grown = rss(broker) - before
            assert grown < 16 * MiB, f"the broker grew by {grown / MiB:.1f} MiB"
            assert not any(is_closed_by_peer(s, 0.01) for s in attackers)
            for sock in attackers:
                sock.close()
        finally:
            consumer.close()


def test_request_memory_is_bounded_and_stalled_frames_are_reclaimed() -> None:
    # The idle timeout is far away: the healthy client must not wait for it (before memory
    # was reclaimed from stalled frames, it did: reading stopped on every connection).
    config = {"queued.max.request.bytes": 8 * MiB, "socket.request.max.bytes": 16 * MiB,
              "connections.max.idle.ms": 600000}
    with EmbeddedBroker(config=config) as broker:
        healthy = RawClient(broker.bootstrap, timeout=30)
        create(healthy, "t")
        assert produce(healthy, "t", batch([b"before"]))[0] == 0
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        producer.produce("t", b"warm-up")
        assert producer.flush(10) == 0
        before = rss(broker)
        # 12 clients each send 6 MiB of a 16 MiB frame, then stall: 72 MiB unbounded.
        attackers = [attacker(broker, 16 * MiB, 6 * MiB) for _ in range(12)]
        time.sleep(0.5)
        grown = rss(broker) - before
        # The pool (8 MiB) plus the oldest frame, which may finish (<= 16 MiB), plus reads.
        assert grown < 30 * MiB, f"the broker grew by {grown / MiB:.1f} MiB"
        # The stalled frames are closed to get the memory back, and both clients are served
        # again within seconds.
        started = time.monotonic()
        assert produce(healthy, "t", batch([b"after"]))[0] == 0
        delivered: list[object] = []
        producer.produce("t", b"during", on_delivery=lambda err, _msg: delivered.append(err))
        assert producer.flush(10) == 0 and delivered == [None]
        assert time.monotonic() - started < 10
        healthy.close()
        # Closed until the rest fits under the bound (until the idle timeout): one or two
        # frames (a client may have sent less than its 6 MiB before the broker paused it).
        time.sleep(2)
        assert sum(is_closed_by_peer(s, 0.01) for s in attackers) >= len(attackers) - 2
        again = RawClient(broker.bootstrap)
        assert fetch(again, "t", 0).high_watermark == 4  # type: ignore[attr-defined]
        again.close()
        assert any("connections whose incomplete requests" in line for line in broker.output)


def test_idle_and_stalled_connections_are_closed_but_waiting_ones_are_not() -> None:
    with EmbeddedBroker(config={"connections.max.idle.ms": 1000}) as broker:
        client = RawClient(broker.bootstrap)
        create(client, "quiet")
        idle = socket.create_connection((broker.host, broker.port))
        stalled = attacker(broker, 1000, 10)
        started = time.monotonic()
        # A fetch parked for 2.5 s (longer than the idle timeout) is waiting on the broker.
        parked = fetch(client, "quiet", 0, max_wait_ms=2500)
        assert time.monotonic() - started >= 2.4
        assert parked.error_code == 0  # type: ignore[attr-defined]
        assert is_closed_by_peer(idle, 5) and is_closed_by_peer(stalled, 5)
        assert time.monotonic() - started < 6
        # A client that keeps talking stays connected.
        for _ in range(8):
            time.sleep(0.3)
            assert fetch(client, "quiet", 0).error_code == 0  # type: ignore[attr-defined]
        client.close()


def test_rejected_connections_are_logged_rate_limited() -> None:
    with EmbeddedBroker(config={"socket.request.max.bytes": 1000}) as broker:
        for _ in range(40):
            sock = socket.create_connection((broker.host, broker.port))
            sock.sendall(struct.pack(">i", 10_000))
            assert is_closed_by_peer(sock, 5)
            sock.close()
        for _ in range(10):  # an unsupported version is rejected the same way
            client = RawClient(broker.bootstrap)
            client.send_frame(client.header(ApiKey.METADATA, 99))
            assert is_closed_by_peer(client.sock, 5)
            client.close()
        client = RawClient(broker.bootstrap)
        create(client, "still-serving")
        client.close()
        rejections = [line for line in broker.output if "closing 127.0.0.1" in line]
        assert 1 <= len(rejections) <= 10, rejections


def test_a_produce_waiting_for_a_paused_follower_lets_the_next_one_append(
        strom_cluster_factory: Callable[..., EmbeddedCluster]) -> None:
    """Two-phase Produce with real brokers: while the follower is stopped, an acks=all
    Produce waits for it, and the next Produce on the same connection is appended meanwhile
    (the leader's log holds both); once the follower is back both are answered, in order,
    at consecutive offsets. Served one at a time, the second was not even read."""
    cluster = strom_cluster_factory(2)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("two-phase", num_partitions=1, replica_assignment=[[0, 1]])])[
        "two-phase"].result(30)
    leader = RawClient(cluster.brokers[0].bootstrap)
    deadline = time.monotonic() + 30
    while produce(leader, "two-phase", batch([b"warm"]))[0] != 0:  # both in the ISR
        assert time.monotonic() < deadline
        time.sleep(0.2)

    def log_size() -> int:
        resp = leader.call(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": [
            {"topic": "two-phase", "partitions": [0]}]})
        return int(resp.results[0].topics[0].partitions[0].partition_size)

    one, two = batch([b"first"]), batch([b"second"])
    before = log_size()
    waiting = RawClient(cluster.brokers[0].bootstrap)
    cluster.pause(1)
    try:
        for records in (one, two):
            body = api.request(ApiKey.PRODUCE, 9, {
                "transactional_id": None, "acks": -1, "timeout_ms": 20000,
                "topic_data": [{"name": "two-phase", "partition_data": [
                    {"index": 0, "records": records}]}]})
            waiting.send_frame(waiting.header(ApiKey.PRODUCE, 9) + body)
        deadline = time.monotonic() + 5
        while log_size() < before + len(one) + len(two):
            assert time.monotonic() < deadline, "the second Produce was not appended"
            time.sleep(0.05)
        waiting.sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            waiting.read_frame()  # neither is answered while the follower is stopped
    finally:
        cluster.resume(1)
    waiting.sock.settimeout(20)
    answers = []
    for _ in range(2):
        frame = waiting.read_frame()
        response = api.decode_response(ApiKey.PRODUCE, 9, frame[5:])  # a v1 header
        part = response.responses[0].partition_responses[0]
        answers.append((struct.unpack(">i", frame[:4])[0], part.error_code, part.base_offset))
    first = answers[0][2]
    assert answers == [(waiting.correlation - 1, 0, first), (waiting.correlation, 0, first + 1)]
    waiting.close()
    leader.close()
