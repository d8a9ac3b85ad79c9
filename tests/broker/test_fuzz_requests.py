"""Fuzz every supported API at every version through the real dispatcher and handlers.

Random and mutated request bodies must either be answered or close only that connection
(CloseConnection); no other exception may escape, and the broker keeps serving afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
import struct
from pathlib import Path

from strom.broker.dispatch import CloseConnection, ConnectionContext, Dispatcher
from strom.broker.handlers import build_handlers
from strom.broker.server import BrokerServer
from strom.common.config import BrokerConfig
from strom.protocol import api
from strom.protocol.versions import SUPPORTED, ApiKey, request_header_version

CASES_PER_VERSION = 60


def header(api_key: int, version: int) -> bytes:
    raw = struct.pack(">hhih", api_key, version, 7, 4) + b"fuzz"
    return raw + (b"\x00" if request_header_version(api_key, version) == 2 else b"")


def seed_body(api_key: int, version: int) -> bytes:
    try:
        return api.request(api_key, version, {})
    except Exception:
        return b""


def mutate(rng: random.Random, body: bytes) -> bytes:
    data = bytearray(body)
    choice = rng.random()
    if not data or choice < 0.3:
        return rng.randbytes(rng.randrange(0, 64))
    if choice < 0.6:
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if choice < 0.8:
        return bytes(data[: rng.randrange(len(data))])
    return bytes(data) + rng.randbytes(rng.randrange(1, 16))


def test_fuzz_every_api_version(tmp_path: Path) -> None:
    async def scenario() -> None:
        config = BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)})
        server = BrokerServer(config)
        await server.start()
        try:
            assert server.state is not None
            server.state.create_topic("fuzz", 2)
            dispatcher = Dispatcher(build_handlers(server.state))
            rng = random.Random(20261122)
            answered = closed = 0
            for api_key, (low, high) in SUPPORTED.items():
                for version in range(low, high + 1):
                    seed = seed_body(api_key, version)
                    for _ in range(CASES_PER_VERSION):
                        frame = memoryview(bytearray(header(api_key, version) +
                                                     mutate(rng, seed)))
                        try:
                            result = dispatcher.dispatch(ConnectionContext("fuzz"), frame)
                            if inspect.isawaitable(result):
                                with contextlib.suppress(TimeoutError):
                                    await asyncio.wait_for(result, 0.2)
                            answered += 1
                        except CloseConnection:
                            closed += 1
            assert answered and closed
            # Still serving: a normal metadata request works.
            ok = dispatcher.dispatch(ConnectionContext("after"), memoryview(bytearray(
                header(ApiKey.METADATA, 12) + api.request(ApiKey.METADATA, 12, {
                    "topics": None, "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False}))))
            assert isinstance(ok, list) and ok
        finally:
            await server.stop()

    asyncio.run(scenario())
