"""The producer's fast records encoder writes exactly what the protocol's BatchBuilder does."""

from __future__ import annotations

import random

import pytest

from strom.client.batching import build_batch
from strom.protocol.records.builder import BatchBuilder


def _record(rng: random.Random, base: int) -> tuple[int, bytes | None, bytes | None,
                                                    tuple[tuple[str, bytes | None], ...]]:
    def blob() -> bytes | None:
        if rng.random() < 0.15:
            return None
        return rng.randbytes(rng.choice([0, 1, 63, 64, 100, 8191, 8192, 20000]))

    headers = (("h", rng.randbytes(3)), ("n", None)) if rng.random() < 0.2 else ()
    return base + rng.choice([0, 1, 63, 64, 5000, 20000, -1, -100]), blob(), blob(), headers


@pytest.mark.parametrize("seed", range(20))
def test_fast_encoder_matches_batch_builder(seed: int) -> None:
    rng = random.Random(seed)
    records = [_record(rng, 1_700_000_000_000) for _ in range(rng.randrange(1, 60))]
    builder = BatchBuilder(producer_id=7, producer_epoch=1, base_sequence=3)
    for timestamp, key, value, headers in records:
        builder.append(timestamp, key, value, list(headers))
    assert build_batch(records, producer_id=7, producer_epoch=1,
                       base_sequence=3) == bytes(builder.build())
