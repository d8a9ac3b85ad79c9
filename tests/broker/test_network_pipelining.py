"""Two-phase Produce on one connection (:mod:`strom.broker.network`): a Produce that has
taken effect and waits only for its acknowledgements lets the next Produce be processed,
answers go out in request order, and anything else waits as in Kafka.

The connection runs on a real TCP connection with a scripted dispatcher (this is a unit test of
the network layer: the real broker's Produce is covered in tests/replication and by the
cluster test below it in tests/testing)."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from strom.broker.dispatch import CloseConnection, ConnectionContext, Dispatched
from strom.broker.network import MAX_PIPELINED, Connections, KafkaConnection
from strom.broker.request_memory import RequestMemoryPool

PRODUCE, FETCH, METADATA = 0, 1, 3  # api keys


class Script:
    """Dispatches frames ``<api key:int16><tag:int16>``: a Produce tagged ``wait`` returns a
    Dispatched future, one tagged ``remote`` a plain future (its effect still to come), a
    Fetch a plain future; anything else is answered at once. The answer is the tag."""

    WAIT, REMOTE, NOW = 1, 2, 3

    def __init__(self) -> None:
        self.dispatched: list[int] = []
        self.futures: dict[int, asyncio.Future[Any]] = {}

    def dispatch(self, conn: ConnectionContext, frame: memoryview) -> Any:
        api, tag = struct.unpack_from(">hh", frame)
        self.dispatched.append(tag)
        kind = tag // 100
        if kind == self.NOW:
            return [struct.pack(">ih", 2, tag)]
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.futures[tag] = future
        answer = self._answer(future, tag)
        return Dispatched(answer) if api == PRODUCE and kind == self.WAIT else answer

    @staticmethod
    async def _answer(future: asyncio.Future[Any], tag: int) -> list[bytes]:
        await future
        return [struct.pack(">ih", 2, tag)]


def frame(api: int, tag: int) -> bytes:
    return struct.pack(">ihh", 4, api, tag)


async def connected(script: Script) -> tuple[socket.socket, KafkaConnection]:
    loop = asyncio.get_running_loop()
    with socket.create_server(("127.0.0.1", 0)) as server:
        ours = socket.create_connection(server.getsockname())
        theirs, _ = server.accept()
    connections = Connections(RequestMemoryPool(None), None)
    protocol = KafkaConnection(script, 1 << 20, connections)  # type: ignore[arg-type]
    await loop.connect_accepted_socket(lambda: protocol, theirs)
    ours.setblocking(False)
    return ours, protocol


async def answers(sock: socket.socket, count: int, timeout: float = 2.0) -> list[int]:
    loop = asyncio.get_running_loop()
    data = b""
    async with asyncio.timeout(timeout):
        while len(data) < 6 * count:
            data += await loop.sock_recv(sock, 6 * count - len(data))
    return [struct.unpack_from(">h", data, 6 * i + 4)[0] for i in range(count)]


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(2.0):
        while not condition():
            await asyncio.sleep(0.001)


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())  # type: ignore[arg-type]


def test_a_produce_waiting_for_acks_lets_the_next_produce_in_and_answers_stay_in_order(
) -> None:
    async def scenario() -> None:
        script = Script()
        sock, _ = await connected(script)
        sock.sendall(frame(PRODUCE, 101) + frame(PRODUCE, 102) + frame(PRODUCE, 301)
                     + frame(METADATA, 302) + frame(PRODUCE, 103))
        # the three Produce requests are processed; the Metadata request waits for them
        await until(lambda: script.dispatched == [101, 102, 301])
        await asyncio.sleep(0.05)
        assert script.dispatched == [101, 102, 301]
        script.futures[102].set_result(None)  # the second is acknowledged first ...
        await asyncio.sleep(0.05)
        with pytest.raises(BlockingIOError):
            sock.recv(4096)  # ... but is not answered before the first
        script.futures[101].set_result(None)
        assert await answers(sock, 3) == [101, 102, 301]
        # then the Metadata request, and the Produce behind it
        await until(lambda: script.dispatched == [101, 102, 301, 302, 103])
        assert await answers(sock, 1) == [302]
        script.futures[103].set_result(None)
        assert await answers(sock, 1) == [103]
        sock.close()

    run(scenario)


def test_a_request_whose_effect_is_still_to_come_holds_the_next_back() -> None:
    async def scenario() -> None:
        script = Script()
        sock, _ = await connected(script)
        sock.sendall(frame(PRODUCE, 201) + frame(PRODUCE, 101) + frame(FETCH, 202)
                     + frame(PRODUCE, 102))
        await until(lambda: script.dispatched == [201])
        await asyncio.sleep(0.05)
        assert script.dispatched == [201]  # a remote verification before its append
        script.futures[201].set_result(None)
        await until(lambda: script.dispatched == [201, 101])
        assert await answers(sock, 1) == [201]
        await asyncio.sleep(0.05)
        assert script.dispatched == [201, 101]  # a Fetch waits for the Produce in flight
        script.futures[101].set_result(None)
        await until(lambda: script.dispatched == [201, 101, 202])
        await asyncio.sleep(0.05)
        assert script.dispatched == [201, 101, 202]  # and a Produce for the parked Fetch
        script.futures[202].set_result(None)
        await until(lambda: script.dispatched == [201, 101, 202, 102])
        script.futures[102].set_result(None)
        assert await answers(sock, 3) == [101, 202, 102]
        sock.close()

    run(scenario)


def test_produce_requests_in_flight_are_bounded() -> None:
    async def scenario() -> None:
        script = Script()
        sock, protocol = await connected(script)
        tags = [100 + i for i in range(MAX_PIPELINED + 3)]
        sock.sendall(b"".join(frame(PRODUCE, t) for t in tags))
        await until(lambda: len(script.dispatched) == MAX_PIPELINED)
        await asyncio.sleep(0.05)
        assert script.dispatched == tags[:MAX_PIPELINED]
        assert protocol.busy
        script.futures[tags[0]].set_result(None)
        assert await answers(sock, 1) == [tags[0]]
        await until(lambda: len(script.dispatched) == MAX_PIPELINED + 1)
        for tag in tags[1:]:
            await until(lambda tag=tag: tag in script.futures)  # type: ignore[misc]
            script.futures[tag].set_result(None)
        assert await answers(sock, len(tags) - 1) == tags[1:]
        await until(lambda: not protocol.busy)
        sock.close()

    run(scenario)


def test_a_failed_request_closes_the_connection_before_later_answers_go_out() -> None:
    async def scenario() -> None:
        script = Script()
        sock, _ = await connected(script)
        sock.sendall(frame(PRODUCE, 101) + frame(PRODUCE, 102))
        await until(lambda: script.dispatched == [101, 102])
        script.futures[102].set_result(None)
        script.futures[101].set_exception(CloseConnection("the first one failed"))
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(2.0):
            assert await loop.sock_recv(sock, 4096) == b""  # closed, nothing answered
        sock.close()

    run(scenario)
