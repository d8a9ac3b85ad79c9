"""Producer ids come from store blocks and are never handed out twice, across restarts too."""

from __future__ import annotations

from pathlib import Path

from strom.controller.producer_ids import ProducerIdManager
from strom.metadata.image import BrokerInfo
from strom.metadata.local import LocalMetadataStore
from strom.testing.metadata import MemoryMetadataStore


def test_ids_are_consecutive_and_blocks_reserved_only_when_needed() -> None:
    store = MemoryMetadataStore()
    ids = ProducerIdManager(store, block_size=3)
    assert store.allocate_producer_id_block(1).first == 0  # someone else's block
    assert [ids.next_id() for _ in range(7)] == [1, 2, 3, 4, 5, 6, 7]
    assert store.allocate_producer_id_block(1).first == 10  # three blocks of 3 were taken


def test_no_reuse_across_restarts(tmp_path: Path) -> None:
    broker = BrokerInfo(0, "h", 9092)
    first = ProducerIdManager(LocalMetadataStore(tmp_path, broker))
    assert [first.next_id(), first.next_id()] == [0, 1]
    second = ProducerIdManager(LocalMetadataStore(tmp_path, broker))
    assert second.next_id() == 1000  # the rest of the first block is never used
