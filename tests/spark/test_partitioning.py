"""Column-wise partitioning agrees with the client's record-by-record partitioner (and so with
the Java client: murmur2 values from Kafka's UtilsTest). Needs pyarrow and numpy only."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

import numpy as np
import pyarrow as pa

from strom.client.partitioner import DefaultPartitioner, key_partition
from strom.client.partitioner import murmur2 as murmur2_one
from strom.common.errors import UnknownTopicOrPartitionError
from strom.spark.partitioning import (
    StickyPartitioner,
    assign_partitions,
    key_partitions,
    murmur2,
)
from tests.client.test_partitioner import JAVA_MURMUR2


def test_murmur2_matches_java() -> None:
    keys = sorted(JAVA_MURMUR2)
    assert murmur2(pa.array(keys, pa.binary())).astype(np.int32).tolist() == [
        JAVA_MURMUR2[k] for k in keys]


@pytest.mark.parametrize("large", [False, True])
def test_murmur2_of_every_length_matches_the_client(large: bool) -> None:
    rng = random.Random(3)
    keys: list[bytes | None] = [rng.randbytes(rng.choice([rng.randrange(40), 1000]))
                                for _ in range(3000)]
    keys[17] = None  # hashes as empty (never used for a null key, but must not break)
    array = pa.array(keys, pa.large_binary() if large else pa.binary()).slice(5)  # offset > 0
    got = murmur2(array).tolist()
    assert got == [murmur2_one(k or b"") & 0xFFFFFFFF for k in keys[5:]]
    assert key_partitions(array, 7).tolist() == [key_partition(k or b"", 7) for k in keys[5:]]


def test_sticky_partitioner_is_the_clients_across_calls() -> None:
    rng = random.Random(11)
    sizes = [rng.choice([10, 130, 5000, 20000]) for _ in range(2000)]
    client = DefaultPartitioner(batch_size=16384, rng=random.Random(5))
    expected = [client.partition("t", None, 6, size) for size in sizes]
    sticky = StickyPartitioner(16384, rng=random.Random(5))
    got: list[int] = []
    position = 0
    while position < len(sizes):
        step = rng.choice([1, 7, 300])
        got += sticky.assign("t", np.array(sizes[position:position + step], np.int64),
                             6).tolist()
        position += step
    assert got == expected
    assert len(set(got)) > 1


def test_explicit_partition_wins_then_key_then_sticky() -> None:
    keys = pa.array([b"a", None, b"b", None, b"c"], pa.binary())
    explicit = pa.array([3, 0, None, None, None], pa.int32())
    sticky = StickyPartitioner(10**6, rng=random.Random(1))
    got = assign_partitions("t", 4, explicit, keys, np.full(5, 100, np.int64), sticky).tolist()
    assert got[:2] == [3, 0]
    assert got[2] == key_partition(b"b", 4)
    assert got[4] == key_partition(b"c", 4)
    assert 0 <= got[3] < 4
    all_keyed = assign_partitions("t", 4, None, pa.array([b"x", b"y"]),
                                  np.ones(2, np.int64), sticky).tolist()
    assert all_keyed == [key_partition(b"x", 4), key_partition(b"y", 4)]


@pytest.mark.parametrize("partition", [-1, 4])
def test_explicit_partition_out_of_range_is_refused(partition: int) -> None:
    with pytest.raises(UnknownTopicOrPartitionError, match=f"partition {partition} "):
        assign_partitions("t", 4, pa.array([0, partition]), pa.array([b"k", b"k"]),
                          np.ones(2, np.int64), StickyPartitioner(100))
