"""Producer ids for InitProducerId, handed out from blocks reserved through the metadata store.

A block of :data:`BLOCK_SIZE` ids is reserved with
:meth:`~strom.metadata.store.MetadataStore.allocate_producer_id_block` (durable before it
returns) when the first id is asked for and each time a block runs out; ids are handed out in
order from the block. Ids left in a block when the broker stops are never used: the next
broker run reserves a new block, so no id is handed out twice, across restarts and crashes
too (as Kafka's ``ProducerIdManager``). Owned by the event-loop thread.
"""

from __future__ import annotations

from strom.metadata.store import MetadataStore, ProducerIdBlock

BLOCK_SIZE = 1000


class ProducerIdManager:
    def __init__(self, store: MetadataStore, block_size: int = BLOCK_SIZE) -> None:
        self._store = store
        self._block_size = block_size
        self._block: ProducerIdBlock | None = None
        self._next = 0

    def next_id(self) -> int:
        """A producer id never handed out before (reserves a new block when needed)."""
        if self._block is None or self._next > self._block.last:
            self._block = self._store.allocate_producer_id_block(self._block_size)
            self._next = self._block.first
        pid = self._next
        self._next += 1
        return pid
