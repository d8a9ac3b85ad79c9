"""pytest plugin (registered through the ``pytest11`` entry point when strom is installed).

Fixtures:
- ``strom_broker``: one broker for the whole session; yields its :class:`EmbeddedBroker`
  (use ``.bootstrap`` for the address).
- ``strom_broker_factory``: call it to start dedicated brokers, stopped (and their temporary
  data directories removed) at the end of the test::

      strom_broker_factory(config: Mapping[str, object] | None = None, *,
                           data_dir: str | Path | None = None, port: int = 0,
                           host: str = "127.0.0.1", log_level: str = "WARNING")
          -> EmbeddedBroker

  ``config`` holds broker keys (``strom broker --help-config``), as ``--set`` would.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Protocol

import pytest

from strom.testing.broker import EmbeddedBroker


class BrokerFactory(Protocol):
    """The ``strom_broker_factory`` fixture: starts an :class:`EmbeddedBroker` per call."""

    def __call__(self, config: Mapping[str, object] | None = None, *,
                 data_dir: str | Path | None = None, port: int = 0, host: str = "127.0.0.1",
                 log_level: str = "WARNING") -> EmbeddedBroker: ...


@pytest.fixture(scope="session")
def strom_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture
def strom_broker_factory() -> Iterator[BrokerFactory]:
    brokers: list[EmbeddedBroker] = []

    def start(config: Mapping[str, object] | None = None, *,
              data_dir: str | Path | None = None, port: int = 0, host: str = "127.0.0.1",
              log_level: str = "WARNING") -> EmbeddedBroker:
        broker = EmbeddedBroker(config, data_dir=data_dir, port=port, host=host,
                                log_level=log_level).start()
        brokers.append(broker)
        return broker

    yield start
    for broker in brokers:
        broker.close()
