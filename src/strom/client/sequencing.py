"""Sequence numbers of an idempotent producer, per partition (KIP-98), and what errors mean.

The broker accepts a partition's batch only if its base sequence is exactly the one after the
last batch it appended for this producer id and epoch, which is what lets the producer keep up
to five batches in flight and retry safely. When batch N fails with a retriable error, batches
N+1… that were already in flight come back OUT_OF_ORDER_SEQUENCE_NUMBER: that is expected and
they are retried after N. When a batch fails for good, later sequences would never be
accepted, so the partition continues from the last acknowledged sequence: a new
*generation*, and batches numbered in the old one get new sequence numbers before they are
resent (Kafka's pre-KIP-360 behaviour, without bumping the epoch).

Owned by one :class:`~strom.client.producer.Producer`, used only on its event loop.
"""

from __future__ import annotations

from collections import defaultdict

from strom.common.errors import KafkaError, OutOfOrderSequenceNumberError
from strom.common.types import TopicPartition

SEQUENCE_WRAP = 2**31
MAX_IN_FLIGHT = 5  # the broker remembers the last five batches per producer and partition


class Sequencer:
    """Assigns, acknowledges and resets per-partition sequence numbers."""

    def __init__(self) -> None:
        self._next: dict[TopicPartition, int] = defaultdict(int)
        self._acked: dict[TopicPartition, int] = defaultdict(int)
        self._generation: dict[TopicPartition, int] = defaultdict(int)

    def assign(self, tp: TopicPartition, count: int) -> tuple[int, int]:
        """The base sequence for a batch of ``count`` records, and the current generation."""
        base = self._next[tp]
        self._next[tp] = (base + count) % SEQUENCE_WRAP
        return base, self._generation[tp]

    def is_current(self, tp: TopicPartition, generation: int) -> bool:
        """Whether a batch numbered in ``generation`` may be sent as it is."""
        return generation == self._generation[tp]

    def acknowledged(self, tp: TopicPartition, base: int, count: int) -> None:
        """The broker appended (or already had) the batch ``base`` of ``count`` records.

        Acknowledgements can come out of order (a batch whose request timed out is retried
        and answered as a duplicate after later batches were acknowledged); the broker's
        sequence only moves forward, so an older one never moves ``_acked`` back.
        """
        end = (base + count) % SEQUENCE_WRAP
        if (end - self._acked[tp]) % SEQUENCE_WRAP < SEQUENCE_WRAP // 2:
            self._acked[tp] = end

    def should_retry(self, tp: TopicPartition, base: int, error: KafkaError) -> bool:
        """Retry after ``error``? Out-of-order answers behind an unacknowledged batch are."""
        if isinstance(error, OutOfOrderSequenceNumberError) and base != self._acked[tp]:
            return True
        return error.retriable

    def reset(self, tp: TopicPartition) -> None:
        """A batch failed for good: continue numbering after the last acknowledged batch."""
        self._next[tp] = self._acked[tp]
        self._generation[tp] += 1
