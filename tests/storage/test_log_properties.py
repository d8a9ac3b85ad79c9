"""Model-based tests: random operation sequences against a list-of-batches model."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.common.clock import ManualClock
from strom.storage.log import Log
from tests.storage.helpers import NOW, batch_offsets, make_batch, payload, read_all, topic_config

CONFIG = topic_config(segment_bytes=400, index_interval_bytes=90)

operation = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 4), st.integers(0, 60)),
    st.tuples(st.just("truncate"), st.floats(0, 1), st.just(0)),
    st.tuples(st.just("delete_records"), st.floats(0, 1), st.just(0)),
    st.tuples(st.just("reopen_clean"), st.just(0), st.just(0)),
    st.tuples(st.just("reopen_crash"), st.just(0), st.just(0)),
    st.tuples(st.just("read"), st.floats(0, 1), st.integers(1, 500)),
)


def open_log(directory: Path, clock: ManualClock, *, clean: bool, start: int, rp: int) -> Log:
    return Log.open(directory, CONFIG, clock=clock, clean_shutdown=clean, log_start_offset=start,
                    recovery_point=rp)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, max_size=40))
def test_random_operations_match_model(ops: list[tuple[str, float, int]]) -> None:
    clock = ManualClock(NOW)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "t-0"
        plog = open_log(directory, clock, clean=False, start=0, rp=0)
        model: list[tuple[int, int]] = []  # (base, last) of every batch, in order
        start = leo = 0
        try:
            for op, x, n in ops:
                if op == "append":
                    batch = make_batch([b"x" * n] * int(x), timestamps=[NOW + n] * int(x))
                    result = plog.append(payload(batch), leader_epoch=1)
                    assert result.base_offset == leo
                    model.append((leo, leo + int(x) - 1))
                    leo += int(x)
                elif op == "truncate":
                    target = start + int((leo - start) * x)
                    plog.truncate_to(target)
                    model = [b for b in model if b[1] < target]
                    leo = min(leo, target)
                elif op == "delete_records":
                    target = start + int((leo - start) * x)
                    start = max(start, target)
                    assert plog.delete_records_before(target) == start
                elif op in ("reopen_clean", "reopen_crash"):
                    clean = op == "reopen_clean"
                    if clean:
                        plog.flush()
                        plog.close()
                    plog = open_log(directory, clock, clean=clean, start=plog.log_start_offset,
                                    rp=plog.recovery_point)
                    # The LEO is physical again: the end of the last batch (or, with no batch,
                    # somewhere up to the old LEO), never below the log start.
                    if model and model[-1][1] + 1 >= start:
                        leo = model[-1][1] + 1
                    else:
                        assert start <= plog.log_end_offset <= leo
                        leo = plog.log_end_offset
                elif op == "read" and leo > start:
                    offset = start + int((leo - start) * min(x, 0.999))
                    holding = [b for b in model if b[1] >= offset]
                    read = plog.read(offset, n, upper_bound=plog.log_end_offset)
                    if holding:
                        data = read.to_bytes()
                        assert batch_offsets(data)[0] == holding[0]
                    else:
                        assert read.size == 0
                visible = [b for b in model if b[1] >= start]
                assert plog.log_start_offset == start
                assert plog.log_end_offset == leo
                assert batch_offsets(read_all(plog)) == visible
        finally:
            plog.close()


def test_flush_from_a_worker_thread_while_appending(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    plog = Log.open(tmp_path / "t-0", CONFIG, clock=clock)
    stop = threading.Event()
    errors: list[BaseException] = []
    observed: list[tuple[int, int]] = []

    def flusher() -> None:
        while not stop.is_set():
            try:
                plog.flush()
                observed.append((plog.recovery_point, plog.log_end_offset))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
                return

    thread = threading.Thread(target=flusher)
    thread.start()
    try:
        for i in range(400):
            plog.append(payload(make_batch([b"y" * 40] * 2)), leader_epoch=0)
            if i % 50 == 0:
                plog.apply_retention(NOW + 10**12)  # deletes segments under the flusher
    finally:
        stop.set()
        thread.join()
    assert not errors
    assert all(rp <= leo for rp, leo in observed)
    plog.flush()
    assert plog.recovery_point == plog.log_end_offset == 800
    plog.close()
