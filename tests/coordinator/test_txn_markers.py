"""The marker sender against a real broker: a leader that cannot be reached is retried (at
the partition's current leader) without being reported as an unexpected marker error, and
the job completes once the marker is written."""

from __future__ import annotations

import asyncio
import logging

import pytest

from strom.common.types import TopicPartition
from strom.coordinator.txn.markers import NetworkMarkerSender
from strom.coordinator.txn.peers import Leader
from strom.coordinator.txn.shard import MarkerJob
from strom.testing import EmbeddedBroker
from strom.testing.zookeeper import free_port
from tests.compat.helpers import create_topic

TP = TopicPartition("marked", 0)


def test_an_unreachable_leader_is_retried_quietly_then_the_new_leader_takes_the_marker(
        strom_broker: EmbeddedBroker, caplog: pytest.LogCaptureFixture) -> None:
    create_topic(strom_broker.bootstrap, "marked")
    dead = Leader(7, "127.0.0.1", free_port())  # a killed leader: connection refused
    live = Leader(0, strom_broker.host, strom_broker.port)
    leaders = [dead]

    async def run() -> None:
        sender = NetworkMarkerSender(lambda _tp: leaders[0], lambda _tp: True,
                                     retry_backoff_ms=20, request_timeout_s=5)
        done = asyncio.Event()
        sender.send(MarkerJob("t", 41, 0, True, 0, frozenset({TP})), done.set)
        await asyncio.sleep(0.3)  # a few attempts at the dead leader
        assert not done.is_set()
        leaders[0] = live  # the controller elected a new leader
        await asyncio.wait_for(done.wait(), 10)
        await sender.close()

    with caplog.at_level(logging.INFO, logger="strom.coordinator.txn.markers"):
        asyncio.run(run())
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []  # was "marker for marked-0 of producer 41 failed with error -1"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("cannot connect to node 7" in w for w in warnings)
