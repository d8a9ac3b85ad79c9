"""Pure planning arithmetic: read limits per trigger and splitting ranges into Spark tasks.

``rate_limit`` spreads ``maxOffsetsPerTrigger`` across partitions in proportion to each one's
backlog, like Spark's Kafka source, but exactly: the shares are floored and the remaining
offsets go to the partitions with the largest fractional parts, so a trigger reads exactly
``min(limit, backlog)`` offsets and every partition with a backlog eventually advances.

``split_ranges`` turns per-partition offset ranges into at least ``min_partitions`` Spark
tasks by cutting the largest ranges into contiguous pieces (Spark's ``minPartitions``).
"""

from __future__ import annotations

from collections.abc import Mapping

from strom.common.types import TopicPartition


def backlog(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> int:
    """Offsets between ``start`` and ``end`` over all partitions of ``end``."""
    return sum(max(0, end[tp] - start.get(tp, end[tp])) for tp in end)


def rate_limit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               limit: int) -> dict[TopicPartition, int]:
    """End offsets reading at most ``limit`` offsets past ``start``, split by backlog.

    ``start`` must hold every partition of ``latest``; partitions whose latest offset is not
    past their start keep it.
    """
    sizes = {tp: max(0, latest[tp] - start[tp]) for tp in latest}
    total = sum(sizes.values())
    if total <= limit:
        return dict(latest)
    shares = {tp: limit * size / total for tp, size in sizes.items()}
    whole = {tp: int(share) for tp, share in shares.items()}
    remaining = limit - sum(whole.values())
    by_fraction = sorted((tp for tp in sizes if sizes[tp] > whole[tp]),
                         key=lambda tp: (whole[tp] - shares[tp], tp))
    for tp in by_fraction[:remaining]:
        whole[tp] += 1
    return {tp: start[tp] + whole[tp] if sizes[tp] else latest[tp] for tp in latest}


def split_ranges(ranges: Mapping[TopicPartition, tuple[int, int]], min_partitions: int | None
                 ) -> list[tuple[TopicPartition, int, int]]:
    """``(tp, start, end)`` pieces: one per non-empty range, or more to reach ``min_partitions``.

    Pieces of one partition are contiguous and ordered; a range is cut into pieces of equal
    size (± 1) in proportion to its share of all offsets; empty ranges produce no piece.
    """
    nonempty = {tp: r for tp, r in sorted(ranges.items()) if r[1] > r[0]}
    if not min_partitions or min_partitions <= len(nonempty):
        return [(tp, s, e) for tp, (s, e) in nonempty.items()]
    total = sum(e - s for s, e in nonempty.values())
    out: list[tuple[TopicPartition, int, int]] = []
    for tp, (s, e) in nonempty.items():
        size = e - s
        pieces = max(1, min(size, round(min_partitions * size / total)))
        step, extra = divmod(size, pieces)
        position = s
        for i in range(pieces):
            length = step + (1 if i < extra else 0)
            out.append((tp, position, position + length))
            position += length
    return out
