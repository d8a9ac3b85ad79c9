"""An event loop per test for the coordinator twins (load tasks, held writes' futures); tests
stay synchronous and run it with :func:`tests.coordinator.fakes.settle`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.set_event_loop(None)
    loop.close()
