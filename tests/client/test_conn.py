"""Connection: negotiation, pipelining, fallbacks, timeouts and connection loss (fake broker)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from strom.client.conn import Connection, ConnectionRefused
from strom.common.errors import NetworkError, RequestTimedOutError, UnsupportedVersionError
from strom.protocol.versions import SUPPORTED, ApiKey
from tests.client.fake_broker import FakeBroker


async def _with_broker(test: Any, versions: dict[int, tuple[int, int]] | None = None) -> None:
    broker = await FakeBroker(versions).start()
    try:
        await test(broker)
    finally:
        await broker.stop()


def run(test: Any, versions: dict[int, tuple[int, int]] | None = None) -> None:
    asyncio.run(_with_broker(test, versions))


def test_negotiates_highest_common_versions() -> None:
    async def test(broker: FakeBroker) -> None:
        conn = await Connection("127.0.0.1", broker.port).open()
        assert conn.versions[ApiKey.METADATA] == 12
        assert conn.versions[ApiKey.PRODUCE] == 11  # we stop at 11 (v12: transactions V2)
        assert conn.versions[ApiKey.FETCH] == 12  # we stop at 12 (topic ids from 13)
        assert broker.requests[0][:2] == (ApiKey.API_VERSIONS, 4)
        await conn.close()
        assert conn.closed

    run(test)


def test_api_versions_fallback_on_unsupported_version() -> None:
    versions = dict(SUPPORTED)
    versions[ApiKey.API_VERSIONS] = (0, 2)

    async def test(broker: FakeBroker) -> None:
        conn = await Connection("127.0.0.1", broker.port).open()
        # The v4 attempt is answered in the v0 format with error 35; we retry at v2.
        assert [r[:2] for r in broker.requests] == [(ApiKey.API_VERSIONS, 2)]
        assert conn.versions[ApiKey.API_VERSIONS] == 2
        await conn.close()

    run(test, versions)


def test_api_versions_fallback_to_v0() -> None:
    versions = dict(SUPPORTED)
    versions[ApiKey.API_VERSIONS] = (0, 0)

    async def test(broker: FakeBroker) -> None:
        conn = await Connection("127.0.0.1", broker.port).open()
        assert broker.requests[0][:2] == (ApiKey.API_VERSIONS, 0)
        assert ApiKey.METADATA in conn.versions
        await conn.close()

    run(test, versions)


def test_unsupported_api_raises_clear_error() -> None:
    versions = {k: v for k, v in SUPPORTED.items() if k != ApiKey.DELETE_RECORDS}

    async def test(broker: FakeBroker) -> None:
        conn = await Connection("127.0.0.1", broker.port).open()
        with pytest.raises(UnsupportedVersionError, match="DeleteRecords"):
            await conn.request(ApiKey.DELETE_RECORDS, {"topics": [], "timeout_ms": 1})
        await conn.close()

    run(test, versions)


def test_pipelined_responses_matched_by_correlation_id() -> None:
    async def test(broker: FakeBroker) -> None:
        broker.create("a")
        broker.create("b", 3)
        calls = 0

        async def slow_first(key: int, version: int, request: Any) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:
                await asyncio.sleep(0.2)  # the first request is answered last

        broker.hooks[ApiKey.METADATA] = slow_first
        conn = await Connection("127.0.0.1", broker.port).open()
        first, second = await asyncio.gather(
            conn.request(ApiKey.METADATA, {"topics": [{"name": "a"}]}),
            conn.request(ApiKey.METADATA, {"topics": [{"name": "b"}]}),
        )
        assert [t.name for t in first.topics] == ["a"]
        assert len(second.topics[0].partitions) == 3
        await conn.close()

    run(test)


def test_request_timeout() -> None:
    async def test(broker: FakeBroker) -> None:
        async def ignore(key: int, version: int, request: Any) -> str:
            return "ignore"

        broker.hooks[ApiKey.METADATA] = ignore
        conn = await Connection("127.0.0.1", broker.port, request_timeout_s=0.2).open()
        with pytest.raises(RequestTimedOutError, match="Metadata request"):
            await conn.request(ApiKey.METADATA, {"topics": []})
        assert conn.in_flight == 0
        await conn.close()

    run(test)


def test_connection_loss_fails_waiting_requests() -> None:
    async def test(broker: FakeBroker) -> None:
        async def drop(key: int, version: int, request: Any) -> str:
            return "drop"

        broker.hooks[ApiKey.METADATA] = drop
        conn = await Connection("127.0.0.1", broker.port).open()
        with pytest.raises(NetworkError, match="lost"):
            await conn.request(ApiKey.METADATA, {"topics": []})
        assert conn.closed
        with pytest.raises(NetworkError, match="closed"):
            await conn.request(ApiKey.METADATA, {"topics": []})

    run(test)


def test_connect_refused_is_network_error() -> None:
    async def test() -> None:
        with pytest.raises(NetworkError, match=r"could not connect to 127\.0\.0\.1:1") as e:
            await Connection("127.0.0.1", 1).open()
        assert isinstance(e.value, ConnectionRefused)  # nothing listens: told apart

    asyncio.run(test())


def test_wait_closed_returns_when_the_broker_closes_the_connection() -> None:
    async def test(broker: FakeBroker) -> None:
        async def drop(key: int, version: int, request: Any) -> str:
            return "drop"

        broker.hooks[ApiKey.METADATA] = drop
        conn = await Connection("127.0.0.1", broker.port).open()
        waiting = asyncio.ensure_future(conn.wait_closed())
        await asyncio.sleep(0.05)
        assert not waiting.done()
        with pytest.raises(NetworkError):
            await conn.request(ApiKey.METADATA, {"topics": []})
        assert "closed the connection" in await asyncio.wait_for(waiting, 5)
        await conn.close()

    run(test)


def test_a_request_cancelled_as_its_response_arrives_is_cancelled(broker: Any) -> None:
    """The caller's cancel wins even when the response was read in the same loop turn.

    Python 3.11's ``asyncio.wait_for`` returned the result then and dropped the cancel: a
    consumer's heartbeat task cancelled by ``close()`` while a heartbeat answer was being
    delivered kept heartbeating, and ``close()`` waited for it forever (real strom broker)."""
    async def test() -> None:
        host, port = broker.bootstrap.rsplit(":", 1)
        conn = await Connection(host, int(port)).open()
        try:
            for _ in range(20):
                request = asyncio.create_task(conn.request(ApiKey.METADATA, {"topics": []}))
                await asyncio.sleep(0)
                assert conn.in_flight == 1
                while conn.in_flight:  # the read loop took the answer and resolved it
                    await asyncio.sleep(0)
                assert not request.done()
                request.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await request
        finally:
            await conn.close()

    asyncio.run(asyncio.wait_for(test(), 30))
