"""Log compaction semantics: latest value per key, offsets, tombstones, lags, ratio, policy."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from strom.common.clock import ManualClock
from strom.common.errors import InvalidRecordError
from strom.protocol.records.batch import DELETE_HORIZON_MASK
from strom.storage.checkpoint import read_offsets
from strom.storage.log import Log
from tests.storage.cleaner_helpers import (
    TP,
    as_tuples,
    expected_after_cleaning,
    log_batches,
    log_records,
    one_log_cleaner,
    produce,
)
from tests.storage.conftest import OpenLog
from tests.storage.helpers import NOW, make_batch, payload

COMPACT = {"cleanup_policy": "compact", "min_cleanable_dirty_ratio": "0.01"}


def fill_random(plog: Log, count: int, keys: int, *, seed: int = 1,
                codecs: tuple[int, ...] = (0, 1, 2, 3, 4), value_size: int = 20) -> None:
    """``count`` records over ``keys`` keys in batches of 1-6 records, codecs mixed."""
    rng = random.Random(seed)
    produced = 0
    while produced < count:
        n = min(rng.randint(1, 6), count - produced)
        pairs = [(b"key-%03d" % rng.randrange(keys),
                  b"value-%06d-" % (produced + i) + b"x" * value_size) for i in range(n)]
        produce(plog, pairs, codec=rng.choice(codecs), ts=[NOW + produced + i for i in range(n)])
        produced += n


def test_latest_value_per_key_kept_across_segments_and_codecs(
    tmp_path: Path, open_log: OpenLog, clock: ManualClock
) -> None:
    plog = open_log(segment_bytes=1500, **COMPACT)
    fill_random(plog, 600, keys=25)
    produced = log_records(plog)
    codec_of = {h.base_offset: h.compression for h, _ in log_batches(plog)}
    assert len(plog.segments) > 10
    clean_end = plog.active_segment.base_offset
    size_before = plog.size_in_bytes()

    cleaner = one_log_cleaner(tmp_path, plog, clock)
    assert cleaner.clean_once()

    expected = expected_after_cleaning(produced, clean_end)
    assert as_tuples(log_records(plog)) == expected
    assert plog.size_in_bytes() < size_before / 2
    for header, records in log_batches(plog):  # codec and base offsets preserved
        assert codec_of[header.base_offset] == header.compression
        assert all(header.base_offset <= r.offset <= header.last_offset for r in records)
    state = cleaner.state(TP)
    assert state is not None and state.last_cleaned_offset == clean_end and state.passes == 1
    stats = cleaner.stats()
    assert stats.records_removed == len(produced) - len(expected)
    assert stats.bytes_read >= size_before - plog.active_segment.size
    assert read_offsets(tmp_path / "cleaner-offset-checkpoint") == {TP: clean_end}
    # Nothing dirty left: the next cycle has nothing to do.
    assert not cleaner.clean_once()

    # The cleaned segments and their indexes survive a restart (clean and crash).
    directory = plog.directory
    plog.close()
    for clean in (True, False):
        reopened = open_log(directory=directory, clean_shutdown=clean, **COMPACT)
        assert as_tuples(log_records(reopened)) == expected
        reopened.close()


def test_second_pass_compacts_new_dirty_data_against_the_clean_section(
    tmp_path: Path, open_log: OpenLog, clock: ManualClock
) -> None:
    plog = open_log(segment_bytes=800, **COMPACT)
    cleaner = one_log_cleaner(tmp_path, plog, clock)
    fill_random(plog, 200, keys=10, seed=2)
    assert cleaner.clean_once()
    fill_random(plog, 200, keys=10, seed=3)
    produced_end = plog.active_segment.base_offset
    before = log_records(plog)
    segments_before = len(plog.segments)
    assert cleaner.clean_once()
    after = as_tuples(log_records(plog))
    # Segments the first pass shrank were grouped into one cleaned segment.
    assert len(plog.segments) < segments_before
    assert after == expected_after_cleaning(before, produced_end)
    below = [k for offset, _, k, _ in after if offset < produced_end]
    assert len(below) == len(set(below)) == 10


def test_reads_across_compacted_gaps(tmp_path: Path, open_log: OpenLog,
                                     clock: ManualClock) -> None:
    plog = open_log(segment_bytes=600, **COMPACT)
    for i in range(60):
        produce(plog, [(b"k%d" % (i % 5), b"v%d" % i)], ts=NOW + i)
    assert one_log_cleaner(tmp_path, plog, clock).clean_once()
    kept = [r.offset for r in log_records(plog)]
    removed = sorted(set(range(plog.log_end_offset)) - set(kept))
    assert removed and plog.log_start_offset == 0
    for offset in removed:
        batches = log_batches(plog, offset)
        first = batches[0][1][0].offset
        assert first == min(k for k in kept if k > offset)
        ts = plog.offset_for_timestamp(NOW + offset)
        assert ts is not None and ts[0] == first  # ListOffsets lands on the next survivor
    # Reading from the log start (offset 0, compacted away) works too.
    assert log_batches(plog, 0)[0][1][0].offset == kept[0]


def test_tombstones_kept_until_delete_retention_then_removed(
    tmp_path: Path, open_log: OpenLog, clock: ManualClock
) -> None:
    plog = open_log(segment_bytes=10_000, delete_retention_ms=1000, **COMPACT)
    cleaner = one_log_cleaner(tmp_path, plog, clock)
    produce(plog, [(b"a", b"a1"), (b"b", b"b1"), (b"c", b"c1")], ts=NOW - 50)
    produce(plog, [(b"a", None), (b"b", b"b2")], ts=[NOW - 20, NOW - 10])
    plog.roll()
    produce(plog, [(b"z", b"z1")])
    assert cleaner.clean_once(NOW)

    def survivors() -> list[tuple[int, int, bytes | None, bytes | None]]:
        return as_tuples(log_records(plog))

    assert survivors() == [(2, NOW - 50, b"c", b"c1"), (3, NOW - 20, b"a", None),
                           (4, NOW - 10, b"b", b"b2"), (5, NOW, b"z", b"z1")]
    header = log_batches(plog)[1][0]
    assert header.attributes & DELETE_HORIZON_MASK and header.base_timestamp == NOW + 1000
    assert header.last_offset == 4 and header.records_count == 2

    def dirty_more(i: int) -> None:
        produce(plog, [(b"y%d" % i, b"y")])
        plog.roll()

    clock.advance(500)
    dirty_more(1)
    assert cleaner.clean_once()
    assert (3, NOW - 20, b"a", None) in survivors()  # horizon not reached yet
    clock.advance(600)
    dirty_more(2)
    assert cleaner.clean_once()
    assert [k for _, _, k, _ in survivors()] == [b"c", b"b", b"z", b"y1", b"y2"]
    assert cleaner.stats().tombstones_removed == 1


def test_min_compaction_lag_protects_recent_segments(
    tmp_path: Path, open_log: OpenLog, clock: ManualClock
) -> None:
    plog = open_log(segment_bytes=500, min_compaction_lag_ms=60_000, **COMPACT)
    old_ts, new_ts = NOW - 120_000, NOW - 10_000
    for i in range(30):
        produce(plog, [(b"k%d" % (i % 3), b"old%d" % i)], ts=old_ts + i)
    plog.roll()
    boundary = plog.active_segment.base_offset
    for i in range(30):
        produce(plog, [(b"k%d" % (i % 3), b"new%d" % i)], ts=new_ts + i)
    plog.roll()
    produced = log_records(plog)
    cleaner = one_log_cleaner(tmp_path, plog, clock)
    assert cleaner.clean_once(NOW)
    assert as_tuples(log_records(plog)) == expected_after_cleaning(produced, boundary)
    state = cleaner.state(TP)
    assert state is not None and state.last_cleaned_offset == boundary
    # Once the lag has passed, the rest is cleaned.
    clock.advance(60_000)
    assert cleaner.clean_once()
    assert [r.value for r in log_records(plog)] == [b"new27", b"new28", b"new29"]


def test_dirty_ratio_threshold_and_max_compaction_lag(
    tmp_path: Path, open_log: OpenLog, clock: ManualClock
) -> None:
    plog = open_log(segment_bytes=600, cleanup_policy="compact", min_cleanable_dirty_ratio="0.6")
    cleaner = one_log_cleaner(tmp_path, plog, clock)
    for i in range(200):
        produce(plog, [(b"k%d" % i, b"v" * 20)])  # unique keys: nothing to remove
    assert cleaner.clean_once()
    first_pass = cleaner.stats().passes
    for i in range(20):  # a little new dirty data: ratio well below 0.6
        produce(plog, [(b"k%d" % i, b"w" * 20)])
    plog.roll()
    assert not cleaner.clean_once()
    state = cleaner.state(TP)
    assert state is not None and 0 < state.dirty_ratio < 0.6
    assert cleaner.stats().passes == first_pass
    for i in range(400):
        produce(plog, [(b"k%d" % (i % 200), b"x" * 20)])
    plog.roll()
    assert cleaner.clean_once()
    assert [r.value for r in log_records(plog)] == [b"x" * 20] * 200

    # max.compaction.lag.ms forces a pass below the ratio.
    plog.update_config(plog.config.__class__(
        plog.config.broker, {**plog.config.overrides, "max.compaction.lag.ms": 1000}))
    produce(plog, [(b"k0", b"late")], ts=NOW)
    plog.roll()
    assert not cleaner.clean_once(NOW + 500)
    assert cleaner.clean_once(NOW + 5000)
    assert [r.value for r in log_records(plog)].count(b"late") == 1
    assert sum(1 for r in log_records(plog) if r.key == b"k0") == 1


def test_compact_delete_policy_does_both(tmp_path: Path, open_log: OpenLog,
                                         clock: ManualClock) -> None:
    plog = open_log(segment_bytes=500, retention_ms=60_000, cleanup_policy="compact,delete",
                    min_cleanable_dirty_ratio="0.01")
    for i in range(40):  # old: past retention
        produce(plog, [(b"k%d" % (i % 4), b"old")], ts=NOW - 120_000 + i)
    plog.roll()
    for i in range(40):
        produce(plog, [(b"k%d" % (i % 4), b"new%d" % i)], ts=NOW - 1000 + i)
    plog.roll()
    assert plog.apply_retention(NOW) > 0
    assert all(r.value != b"old" for r in log_records(plog))
    cleaner = one_log_cleaner(tmp_path, plog, clock)
    assert cleaner.clean_once(NOW)
    assert [r.value for r in log_records(plog)] == [b"new36", b"new37", b"new38", b"new39"]


def test_delete_only_policy_is_not_compacted(tmp_path: Path, open_log: OpenLog,
                                             clock: ManualClock) -> None:
    plog = open_log(segment_bytes=500, min_cleanable_dirty_ratio="0.01")
    for i in range(40):
        produce(plog, [(b"k", b"v%d" % i)])
    plog.roll()
    assert not one_log_cleaner(tmp_path, plog, clock).clean_once()
    assert len(log_records(plog)) == 40


@pytest.mark.parametrize("codec", [0, 4])
def test_keyless_records_rejected_on_compacted_topics(open_log: OpenLog, codec: int) -> None:
    plog = open_log(**COMPACT)
    produce(plog, [(b"k", b"v")])
    size, leo = plog.size_in_bytes(), plog.log_end_offset
    batch = make_batch([b"v1", b"v2"], keys=[b"k1", None], codec=codec)
    with pytest.raises(InvalidRecordError, match="Compacted topic cannot accept message"):
        plog.append(payload(batch), leader_epoch=0)
    # A good batch before the bad one in the same request is not appended either.
    good = make_batch([b"ok"], keys=[b"k2"])
    with pytest.raises(InvalidRecordError):
        plog.append(payload(good, batch), leader_epoch=0)
    assert (plog.size_in_bytes(), plog.log_end_offset) == (size, leo)
    # Delete-policy topics take keyless records.
    other = open_log(directory=plog.directory.with_name("other-0"))
    other.append(payload(batch), leader_epoch=0)


def test_keyless_records_already_in_the_log_are_removed(
    tmp_path: Path, open_log: OpenLog, clock: ManualClock
) -> None:
    plog = open_log(segment_bytes=400)  # written under "delete", then switched to compact
    for i in range(20):
        plog.append(payload(make_batch([b"x%d" % i], keys=[None if i % 2 else b"k"])),
                    leader_epoch=0)
    plog.roll()
    plog.update_config(plog.config.__class__(
        plog.config.broker, {"cleanup.policy": ["compact"], "min.cleanable.dirty.ratio": 0.01}))
    assert one_log_cleaner(tmp_path, plog, clock).clean_once()
    assert [(r.key, r.value) for r in log_records(plog)] == [(b"k", b"x18")]


def test_producer_state_survives_compaction(tmp_path: Path, open_log: OpenLog,
                                            clock: ManualClock) -> None:
    plog = open_log(segment_bytes=600, **COMPACT)
    pid, epoch = 4242, 3
    seq = 0
    for i in range(5):  # an idempotent producer writes keys that others overwrite later
        produce(plog, [(b"k%d" % i, b"p1"), (b"k%d" % (i + 1), b"p1")], producer_id=pid,
                producer_epoch=epoch, base_sequence=seq)
        seq += 2
    last_base, last_offset = 8, 9
    for i in range(30):
        produce(plog, [(b"k%d" % (i % 6), b"other%d" % i)])
    plog.roll()
    assert one_log_cleaner(tmp_path, plog, clock).clean_once()
    batches = log_batches(plog)
    mine = [h for h, _ in batches if h.producer_id == pid]
    # Only the producer's last batch is left, emptied, with its offsets and sequences.
    assert len(mine) == 1
    kept = mine[0]
    assert (kept.base_offset, kept.last_offset, kept.records_count) == (last_base, last_offset, 0)
    assert (kept.base_sequence, kept.last_sequence, kept.producer_epoch) == (8, 9, epoch)
    directory = plog.directory
    plog.close()
    for snapshot in directory.glob("*.snapshot"):
        snapshot.unlink()  # force a rebuild from the (compacted) log
    reopened = open_log(directory=directory, clean_shutdown=True, **COMPACT)
    entry = reopened.producer_state.producers[pid]
    assert (entry.epoch, entry.last_seq, entry.last_offset) == (epoch, 9, last_offset)
    leo = reopened.log_end_offset
    retry = make_batch([b"p1", b"p1"], keys=[b"k4", b"k5"], producer_id=pid,
                       producer_epoch=epoch, base_sequence=8)
    result = reopened.append(payload(retry), leader_epoch=0)
    assert result.duplicate and result.base_offset == last_base
    assert reopened.log_end_offset == leo
    nxt = make_batch([b"p2"], keys=[b"k0"], producer_id=pid, producer_epoch=epoch,
                     base_sequence=10)
    assert not reopened.append(payload(nxt), leader_epoch=0).duplicate


def test_log_manager_cleaner_api(tmp_path: Path, clock: ManualClock) -> None:
    from strom.common.config import BrokerConfig, TopicConfig
    from strom.storage.log_manager import LogManager

    broker = BrokerConfig({"log.segment.bytes": "500", "log.cleanup.policy": "compact",
                           "log.cleaner.min.cleanable.ratio": "0.01"})
    logs = LogManager(tmp_path, broker, clock)
    logs.load(lambda topic: TopicConfig(broker, {}))
    plog = logs.create("compacted", 0, TopicConfig(broker, {}))
    for i in range(50):
        produce(plog, [(b"k%d" % (i % 3), b"v%d" % i)])
    plog.roll()
    plog.stable_end = plog.log_end_offset  # what the owning partition would publish
    assert logs.clean_once()
    assert [r.value for r in log_records(plog)] == [b"v47", b"v48", b"v49"]
    checkpoint = tmp_path / "cleaner-offset-checkpoint"
    assert checkpoint.read_text().startswith("0\n1\ncompacted 0 ")
    logs.start_cleaner(backoff_ms=5)
    assert logs.cleaner.running
    logs.delete_topic("compacted")
    assert read_offsets(checkpoint) == {}
    logs.shutdown()
    assert not logs.cleaner.running
