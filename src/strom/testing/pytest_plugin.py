"""pytest plugin (registered through the ``pytest11`` entry point when strom is installed).

Fixtures:
- ``strom_broker``: one broker for the whole session; yields its :class:`EmbeddedBroker`
  (use ``.bootstrap`` for the address).
- ``strom_broker_factory``: call it with broker config to start dedicated brokers, stopped
  at the end of the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from strom.testing.broker import EmbeddedBroker


@pytest.fixture(scope="session")
def strom_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture
def strom_broker_factory() -> Iterator[Callable[..., EmbeddedBroker]]:
    brokers: list[EmbeddedBroker] = []

    def start(config: dict[str, Any] | None = None, **kwargs: Any) -> EmbeddedBroker:
        broker = EmbeddedBroker(config, **kwargs).start()
        brokers.append(broker)
        return broker

    yield start
    for broker in brokers:
        broker.close()
