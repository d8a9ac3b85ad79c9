"""Fixtures for compatibility tests: a real strom broker process and unique topic names."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator

import pytest

from strom.testing import EmbeddedBroker
from tests.compat.helpers import create_topic

_counter = itertools.count()


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture
def new_topic(broker: EmbeddedBroker) -> Callable[..., str]:
    def make(partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = f"t{next(_counter)}-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap, name, partitions, config)
        return name

    return make
