"""A burst of topic creations on a 3-broker cluster (real ZooKeeper, broker processes, many
concurrent CreateTopics from librdkafka admin clients) leaves a producer on an existing topic
served all along: every one of its records is delivered and no delivery gap grows long.
(Creation rates and the producer's latency are measured in bench/admin_bench.py.)"""

from __future__ import annotations

import itertools
import threading
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.cli.zookeeper_server import zookeeper_available
from strom.testing import EmbeddedCluster

TOPICS = 400
CLIENTS = 6
LIVENESS_GAP_S = 15.0  # before: 31-35 s without a delivery for 300 topics, 188 s for 2,000


@pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed")
def test_a_burst_of_creations_leaves_a_producer_served() -> None:
    with EmbeddedCluster(3) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("steady", 1, 3, config={"min.insync.replicas": "2"})])[
            "steady"].result(60)
        delivered: list[float] = []
        failed: list[object] = []
        stop = threading.Event()

        def produce() -> None:
            producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                                 "enable.idempotence": True, "linger.ms": 5})

            def report(err: object, _msg: object) -> None:
                (failed.append(err) if err is not None
                 else delivered.append(time.monotonic()))

            while not stop.is_set():
                producer.produce("steady", b"x" * 100, on_delivery=report)
                producer.poll(0.05)
            producer.flush(120)

        producing = threading.Thread(target=produce, daemon=True)
        producing.start()
        time.sleep(3.0)
        clients = [AdminClient({"bootstrap.servers": cluster.bootstrap})
                   for _ in range(CLIENTS)]
        began = time.monotonic()
        futures = [clients[i % CLIENTS].create_topics(
            [NewTopic(f"burst-{i}", 1, 3)], request_timeout=120)[f"burst-{i}"]
            for i in range(TOPICS)]
        for future in futures:
            future.result(180)
        ended = time.monotonic()
        time.sleep(2.0)
        stop.set()
        producing.join(150)
        assert not failed
        during = [t for t in delivered if began <= t <= ended]
        marks = [began, *during, ended]
        longest = max(b - a for a, b in itertools.pairwise(marks))
        assert longest < LIVENESS_GAP_S, f"no delivery for {longest:.1f} s during the burst"
        # Every broker names every new topic with a leader.
        for broker in cluster.brokers.values():
            view = AdminClient({"bootstrap.servers": broker.bootstrap})
            deadline = time.monotonic() + 60
            while True:
                topics = view.list_topics(timeout=30).topics
                ready = sum(1 for i in range(TOPICS) if f"burst-{i}" in topics and all(
                    p.leader >= 0 for p in topics[f"burst-{i}"].partitions.values()))
                if ready == TOPICS:
                    break
                assert time.monotonic() < deadline, f"{ready} of {TOPICS} topics ready"
                time.sleep(0.5)
