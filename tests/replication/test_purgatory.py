"""The delayed-operation contract: complete exactly once, by whichever event comes first."""

from __future__ import annotations

import asyncio

from strom.replication.delayed import DelayedFetch
from strom.replication.purgatory import DelayedOperation, Purgatory
from tests.replication.timers import Timers


class Op(DelayedOperation):
    def __init__(self, timeout_ms: int = 100, ready: bool = False) -> None:
        super().__init__(timeout_ms)
        self.ready = ready
        self.events: list[str] = []
        self.checks = 0

    def try_complete(self) -> bool:
        self.checks += 1
        return self.force_complete() if self.ready else False

    def on_complete(self) -> None:
        self.events.append("complete")

    def on_expiration(self) -> None:
        self.events.append("expired")


def test_completes_at_once_without_being_watched() -> None:
    timers = Timers()
    purgatory: Purgatory[str] = Purgatory("p", timers)
    op = Op(ready=True)
    assert purgatory.try_complete_else_watch(op, ["a"])
    assert op.events == ["complete"] and len(purgatory) == 0 and timers.armed() == 0


def test_watched_then_completed_by_its_event_on_any_key() -> None:
    timers = Timers()
    purgatory: Purgatory[str] = Purgatory("p", timers)
    op = Op()
    assert not purgatory.try_complete_else_watch(op, ["a", "b"])
    assert purgatory.watched("a") == purgatory.watched("b") == 1 and len(purgatory) == 1
    assert purgatory.check_and_complete("b") == 0  # not ready: stays watched
    op.ready = True
    assert purgatory.check_and_complete("b") == 1
    assert op.events == ["complete"]
    # Unwatched from every key at once, and its timer is cancelled.
    assert purgatory.watched("a") == 0 and len(purgatory) == 0 and timers.armed() == 0
    assert purgatory.check_and_complete("a") == 0
    timers.advance(1000)
    assert op.events == ["complete"]


def test_expiry_completes_then_reports_expiration_once() -> None:
    timers = Timers()
    purgatory: Purgatory[str] = Purgatory("p", timers)
    op = Op(timeout_ms=50)
    purgatory.try_complete_else_watch(op, ["a"])
    timers.advance(49)
    assert op.events == []
    timers.advance(1)
    assert op.events == ["complete", "expired"]
    assert purgatory.expired == 1 and purgatory.watched("a") == 0
    op.ready = True
    assert not op.force_complete()  # already completed: nothing runs twice
    assert purgatory.check_and_complete("a") == 0
    assert op.events == ["complete", "expired"]


def test_completion_racing_expiry_runs_once() -> None:
    """The event and the timer both due: whichever runs first wins, the other is a no-op."""
    timers = Timers()
    purgatory: Purgatory[str] = Purgatory("p", timers)
    first, second = Op(timeout_ms=10), Op(timeout_ms=10)
    purgatory.try_complete_else_watch(first, ["k"])
    purgatory.try_complete_else_watch(second, ["k"])
    first.ready = second.ready = True
    # The timer fires for both while they are ready: each completes once, as expired.
    timers.advance(10)
    assert first.events == second.events == ["complete", "expired"]
    assert purgatory.check_and_complete("k") == 0
    # And the other order: the event first, the timer afterwards does nothing.
    third = Op(timeout_ms=10)
    purgatory.try_complete_else_watch(third, ["k"])
    third.ready = True
    assert purgatory.check_and_complete("k") == 1
    timers.advance(10)
    assert third.events == ["complete"]


def test_an_operation_completing_another_during_a_check() -> None:
    """on_complete may complete other operations watching the same key (re-entrancy)."""
    timers = Timers()
    purgatory: Purgatory[str] = Purgatory("p", timers)
    victim = Op()

    class Chain(Op):
        def on_complete(self) -> None:
            super().on_complete()
            victim.force_complete()

    chain = Chain(ready=False)
    purgatory.try_complete_else_watch(chain, ["k"])
    purgatory.try_complete_else_watch(victim, ["k"])
    chain.ready = True
    assert purgatory.check_and_complete("k") == 1
    assert victim.events == ["complete"] and victim.checks == 1  # never re-checked after
    assert len(purgatory) == 0


def test_watch_skips_the_first_check_and_shutdown_completes_everything() -> None:
    timers = Timers()
    purgatory: Purgatory[str] = Purgatory("p", timers)
    op = Op(ready=True)
    purgatory.watch(op, ["k"])
    assert op.checks == 0 and purgatory.watched("k") == 1
    other = Op()
    purgatory.try_complete_else_watch(other, [])  # no keys: can only expire
    purgatory.shutdown()
    assert op.events == other.events == ["complete"]
    assert len(purgatory) == 0 and timers.armed() == 0


def test_a_fetch_skips_its_read_for_an_event_that_cannot_complete_it() -> None:
    reads: list[int] = []
    loop = asyncio.new_event_loop()
    try:
        future: asyncio.Future[str] = loop.create_future()

        def read() -> tuple[str, int, bool]:
            reads.append(1)
            return "answer", (1 if ready["b"] else 0), False

        ready = {"a": False, "b": False}
        purgatory: Purgatory[str] = Purgatory("fetch", Timers())
        op = DelayedFetch(1000, 1, read, future, changed=lambda key: ready[str(key)])
        purgatory.watch(op, ["a", "b"])
        assert purgatory.check_and_complete("a") == 0 and reads == []  # nothing new: no read
        ready["b"] = True
        assert purgatory.check_and_complete("b") == 1 and reads == [1]
        assert future.result() == "answer"
        bigger: asyncio.Future[str] = loop.create_future()
        op = DelayedFetch(1000, 100, read, bigger, changed=lambda key: False)
        purgatory.watch(op, ["a"])
        purgatory.check_and_complete("a")  # min bytes above 1: the sizes must be read
        assert reads == [1, 1]
    finally:
        loop.close()
