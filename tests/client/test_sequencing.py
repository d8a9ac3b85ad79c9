"""Sequence bookkeeping of the idempotent producer."""

from __future__ import annotations

from strom.client.sequencing import SEQUENCE_WRAP, Sequencer
from strom.common.types import TopicPartition

TP = TopicPartition("t", 0)


def test_late_duplicate_ack_does_not_move_the_acknowledged_sequence_back() -> None:
    seq = Sequencer()
    batches = [seq.assign(TP, 10)[0] for _ in range(3)]  # 0, 10, 20
    seq.acknowledged(TP, batches[1], 10)
    seq.acknowledged(TP, batches[2], 10)
    # The first batch's request timed out; its retry is answered (as a duplicate) last.
    seq.acknowledged(TP, batches[0], 10)
    seq.reset(TP)  # a later batch failed for good: numbering continues after 30, not 10
    assert seq.assign(TP, 5)[0] == 30


def test_acknowledged_sequence_wraps() -> None:
    seq = Sequencer()
    seq.acknowledged(TP, SEQUENCE_WRAP - 10, 10)
    seq.acknowledged(TP, 0, 5)
    seq.acknowledged(TP, SEQUENCE_WRAP - 10, 10)  # late, from before the wrap
    seq.reset(TP)
    assert seq.assign(TP, 1)[0] == 5
