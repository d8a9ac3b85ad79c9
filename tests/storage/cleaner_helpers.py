"""Helpers for the log-cleaner tests: keyed produce, decoding a whole log, a one-log cleaner."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from strom.common.clock import Clock
from strom.common.types import TopicPartition
from strom.protocol.records.batch import BatchHeader
from strom.protocol.records.reader import decode_batches
from strom.protocol.records.record import Record
from strom.storage.cleaner import LogCleaner
from strom.storage.log import Log
from tests.storage.helpers import NOW, make_batch, payload, read_all

TP = TopicPartition("topic", 0)
Pair = tuple[bytes, bytes | None]


def produce(
    plog: Log,
    pairs: Sequence[Pair],
    *,
    codec: int = 0,
    ts: int | Sequence[int] = NOW,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> tuple[int, int]:
    """Append one batch of (key, value) records; returns (base offset, last offset)."""
    stamps = [ts] * len(pairs) if isinstance(ts, int) else list(ts)
    batch = make_batch([v for _, v in pairs], keys=[k for k, _ in pairs], codec=codec,
                       timestamps=stamps, producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=base_sequence)
    result = plog.append(payload(batch), leader_epoch=0, now_ms=max(stamps))
    return result.base_offset, result.last_offset


def log_batches(plog: Log, start: int | None = None) -> list[tuple[BatchHeader, list[Record]]]:
    """Every batch from ``start`` (default: the log start) to the HW, decoded (CRC checked)."""
    return list(decode_batches(read_all(plog, start)))


def log_records(plog: Log) -> list[Record]:
    return [record for _, records in log_batches(plog) for record in records]


def as_tuples(records: Sequence[Record]) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [(r.offset, r.timestamp, r.key, r.value) for r in records]


def expected_after_cleaning(
    produced: Sequence[Record], clean_end: int
) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """What a full compaction up to ``clean_end`` leaves: below it, the latest record per
    key (tombstones included); from it on, everything."""
    latest: dict[bytes | None, int] = {}
    for record in produced:
        if record.offset < clean_end:
            latest[record.key] = record.offset
    return as_tuples([r for r in produced
                      if r.offset >= clean_end or latest.get(r.key) == r.offset])


def all_stable(plog: Log) -> Log:
    """Stand in for the owning partition with one replica: everything appended is stable."""
    plog.stable_end = plog.log_end_offset
    return plog


def stable_to_lso(plog: Log) -> Log:
    """Stand in for the owning partition with one replica and open transactions: the high
    watermark is the log end, the stable end Kafka's last stable offset."""
    end = plog.log_end_offset
    plog.producer_state.on_high_watermark(end)
    first_unstable = plog.producer_state.first_unstable_offset()
    plog.stable_end = end if first_unstable is None else min(end, first_unstable)
    return plog


def one_log_cleaner(directory: Path, plog: Log, clock: Clock, *, use_process: bool = True,
                    stable: Callable[[Log], Log] = all_stable) -> LogCleaner:
    """A cleaner over just ``plog`` with its checkpoint in ``directory``; ``stable`` sets
    the log's stable end before each pass."""
    return LogCleaner(directory, lambda: [(TP, stable(plog))], clock, backoff_ms=1,
                      use_process=use_process)
