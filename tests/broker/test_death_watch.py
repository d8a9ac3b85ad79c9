"""The death watch against a real broker process: kill -9 is reported within a second or
two (its port refuses connections), while a broker whose event loop stalls, one stopped by
SIGSTOP, and one that closes the watch's idle connection are never reported."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Callable

import pytest

from strom.broker.death_watch import DeathWatch, Target
from strom.client.conn import Connection
from strom.common.errors import RequestTimedOutError
from strom.testing.broker import EmbeddedBroker

#: A liveness bound, not a timing: the broker is reported ~0.2 s after the kill.
REPORTED_WITHIN_S = 5.0


async def until(condition: Callable[[], bool], timeout: float = REPORTED_WITHIN_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def unanswered(broker: EmbeddedBroker) -> bool:
    """Whether the broker's port accepts a connection and leaves ApiVersions unanswered for
    a second (a stalled or stopped broker)."""
    conn = Connection(broker.host, broker.port, connect_timeout_s=1.0)
    try:
        await conn.open()
    except RequestTimedOutError:
        return True
    finally:
        await conn.close()
    return False


def watch_one(broker: EmbeddedBroker, deaths: list[tuple[int, int, float]]) -> DeathWatch:
    watch = DeathWatch(99, lambda node, epoch: deaths.append((node, epoch, time.monotonic())),
                       refusals=3, interval_s=0.1)
    watch.watch({0: Target(0, 7, broker.host, broker.port)})
    return watch


def test_a_killed_broker_is_reported_a_stalled_or_stopped_one_is_not() -> None:
    deaths: list[tuple[int, int, float]] = []

    async def scenario() -> float:
        with EmbeddedBroker(stall_seconds=3.0) as broker:
            watch = watch_one(broker, deaths)
            try:
                await asyncio.sleep(1.0)  # the watch connection is open
                broker.stall()  # 3 s of a blocked event loop
                await asyncio.sleep(0.2)
                assert await unanswered(broker)  # connects, but nothing is answered
                await asyncio.sleep(3.0)
                assert broker.pid is not None
                os.kill(broker.pid, signal.SIGSTOP)  # 3 s stopped
                assert await unanswered(broker)
                await asyncio.sleep(2.0)
                os.kill(broker.pid, signal.SIGCONT)
                await asyncio.sleep(0.5)
                assert deaths == []
                killed = time.monotonic()
                broker.kill()
                while not deaths and time.monotonic() - killed < REPORTED_WITHIN_S:
                    await asyncio.sleep(0.05)
                return killed
            finally:
                await watch.close()

    killed = asyncio.run(scenario())
    assert deaths, f"not reported within {REPORTED_WITHIN_S} s of the kill"
    node, epoch, at = deaths[0]
    assert (node, epoch) == (0, 7)
    print(f"reported {at - killed:.2f} s after the kill")


def test_a_broker_closing_the_idle_watch_connection_is_not_reported(
        caplog: pytest.LogCaptureFixture) -> None:
    """The broker closes idle connections after 500 ms: the watch reconnects (the broker
    accepts) and reports nothing."""
    caplog.set_level(logging.DEBUG, logger="strom.broker.death_watch")
    deaths: list[tuple[int, int, float]] = []

    async def scenario() -> None:
        with EmbeddedBroker({"connections.max.idle.ms": 500}) as broker:
            watch = watch_one(broker, deaths)
            try:
                await asyncio.sleep(4.0)
            finally:
                await watch.close()

    asyncio.run(scenario())
    assert deaths == []
    assert sum("connection ended" in r.getMessage() for r in caplog.records) >= 2


def test_refusals_zero_watches_nothing() -> None:
    async def scenario() -> frozenset[Target]:
        watch = DeathWatch(1, lambda node, epoch: None, refusals=0, interval_s=0.1)
        watch.watch({2: Target(2, 1, "127.0.0.1", 1)})
        watched = watch.watched
        await watch.close()
        return watched

    assert asyncio.run(scenario()) == frozenset()


def test_a_port_nobody_listens_on_is_reported_after_the_refusals() -> None:
    """No broker at all: three refused connects, 100 ms apart, make one report; it is
    repeated while the target stays watched; a target no longer watched is dropped."""
    deaths: list[int] = []

    async def scenario() -> None:
        import socket
        with socket.socket() as probe:  # a free port, closed again: connects are refused
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        watch = DeathWatch(1, lambda node, epoch: deaths.append(node), refusals=3,
                           interval_s=0.1)
        watch.watch({2: Target(2, 5, "127.0.0.1", port), 1: Target(1, 1, "127.0.0.1", port)})
        assert {t.node_id for t in watch.watched} == {2}  # never itself
        await until(lambda: len(deaths) >= 1)
        await until(lambda: len(deaths) >= 2)  # again while it refuses (retries the action)
        assert set(deaths) == {2}
        watch.watch({})
        reported = len(deaths)
        await asyncio.sleep(1.5)
        assert len(deaths) == reported
        await watch.close()

    asyncio.run(scenario())
