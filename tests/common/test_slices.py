"""run_in_slices: long work on the event loop takes turns with everything else."""

from __future__ import annotations

import asyncio
import time

import pytest

from strom.common import slices
from strom.common.slices import Steps, run_at_once, run_in_slices


def _busy(steps: int, step_s: float, log: list[str], label: str = "step") -> Steps[int]:
    for _ in range(steps):
        end = time.perf_counter() + step_s
        while time.perf_counter() < end:
            pass
        log.append(label)
        yield
    return steps


def test_other_callbacks_run_between_slices() -> None:
    log: list[str] = []

    async def main() -> int:
        loop = asyncio.get_running_loop()

        def tick() -> None:  # a request every 0.3 ms
            log.append("tick")
            loop.call_later(0.0003, tick) if log.count("step") < 20 else None

        loop.call_soon(tick)
        return await run_in_slices(_busy(20, 0.0005, log), slice_s=0.001)

    assert asyncio.run(main()) == 20
    steps_between = [len(run) for run in "".join(
        "s" if entry == "step" else "|" for entry in log).split("|") if run]
    assert max(steps_between) <= 3  # a slice of 1 ms holds about two 0.5 ms steps
    assert log.count("step") == 20


def test_run_at_once_does_not_yield() -> None:
    log: list[str] = []
    assert run_at_once(_busy(5, 0.0, log)) == 5
    assert log == ["step"] * 5


@pytest.fixture
def patient(monkeypatch: pytest.MonkeyPatch) -> None:
    """Background work that never gives up waiting (on a loaded machine a descheduled test
    process would reach the 4 ms bound within a turn or two of the loop)."""
    monkeypatch.setattr(slices, "FOREGROUND_FIRST_S", 60.0)


@pytest.mark.usefixtures("patient")
def test_a_request_s_steps_wait_for_one_slice_not_one_each() -> None:
    """A chain of callbacks (a request's task waking up step after step) while two sliced
    computations run: each step used to wait behind a slice of each (about 20 of their
    0.5 ms steps for 5 steps of the chain); background work now lets the chain finish first."""
    log: list[str] = []

    async def main() -> None:
        work = [asyncio.ensure_future(run_in_slices(_busy(60, 0.0005, log, name), 0.001))
                for name in "ab"]
        while len(log) < 6:  # both are slicing
            await asyncio.sleep(0.001)
        log.append("request")
        for _ in range(5):
            await asyncio.sleep(0)
        log.append("answered")
        await asyncio.gather(*work)

    asyncio.run(main())
    during = log[log.index("request"):log.index("answered")]
    assert len(during) - 1 <= 2  # at most the slice under way when the request came


@pytest.mark.usefixtures("patient")
def test_two_sliced_computations_take_one_slice_per_poll() -> None:
    """Between two polls of the loop for I/O, one background slice runs, not one of each."""
    log: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        selector = loop._selector  # type: ignore[attr-defined]
        select = selector.select

        def polled(timeout: float | None = None) -> list[object]:
            log.append("poll")
            return select(timeout)  # type: ignore[no-any-return, unused-ignore]

        selector.select = polled
        await asyncio.gather(*(run_in_slices(_busy(20, 0.0005, log, name), 0.001)
                               for name in "ab"))

    asyncio.run(main())
    turns = [set(turn.split()) for turn in " ".join(log).split("poll")]
    assert sum(1 for turn in turns if {"a", "b"} <= turn) == 0
    assert log.count("a") == log.count("b") == 20


def test_background_work_is_not_starved_by_a_busy_loop() -> None:
    """A foreground that always has a callback ready delays a slice at most
    FOREGROUND_FIRST_S: the computation still ends."""
    log: list[str] = []

    async def main() -> int:
        loop = asyncio.get_running_loop()
        stop = False

        def busy() -> None:
            if not stop:
                loop.call_soon(busy)

        loop.call_soon(busy)
        try:
            return await asyncio.wait_for(run_in_slices(_busy(10, 0.0005, log), 0.001), 30)
        finally:
            stop = True

    assert asyncio.run(main()) == 10
