"""run_in_slices: long work on the event loop takes turns with everything else."""

from __future__ import annotations

import asyncio
import time

from strom.common.slices import Steps, run_at_once, run_in_slices


def _busy(steps: int, step_s: float, log: list[str]) -> Steps[int]:
    for _ in range(steps):
        end = time.perf_counter() + step_s
        while time.perf_counter() < end:
            pass
        log.append("step")
        yield
    return steps


def test_other_callbacks_run_between_slices() -> None:
    log: list[str] = []

    async def main() -> int:
        loop = asyncio.get_running_loop()

        def tick() -> None:
            log.append("tick")
            loop.call_soon(tick) if len(log) < 60 else None

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
