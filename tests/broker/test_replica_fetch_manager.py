"""ReplicaFetcherManager.update_followed: told only what changed, it touches only that."""

from __future__ import annotations

import asyncio

from strom.broker.replica_fetch import ReplicaFetcherManager
from strom.common.clock import SystemClock
from strom.common.types import TopicPartition
from strom.replication.fetcher import FetcherSettings


def _by_runner(manager: ReplicaFetcherManager) -> dict[tuple[int, int], list[TopicPartition]]:
    return {key: runner.fetcher.partitions
            for key, runner in manager._runners.items()}


def test_only_the_partitions_told_move_between_fetchers() -> None:
    async def scenario() -> None:
        manager = ReplicaFetcherManager(FetcherSettings(1), logs=None,  # type: ignore[arg-type]
                                        address_of=lambda node: None, clock=SystemClock())
        a, b, c = (TopicPartition("t", p) for p in range(3))
        manager.update_followed({a: (2, 0), b: (2, 0), c: (3, 4)})
        assert _by_runner(manager) == {(2, 0): [a, b], (3, 0): [c]}
        runner = manager._runners[(2, 0)]
        state = runner.fetcher.state(a)
        manager.update_followed({b: (3, 1)})  # b's leader moved; a and c untouched
        assert _by_runner(manager) == {(2, 0): [a], (3, 0): [b, c]}
        assert manager._runners[(2, 0)] is runner and runner.fetcher.state(a) is state
        manager.update_followed({a: (2, 0)})  # the same leader and epoch: state kept
        assert runner.fetcher.state(a) is state
        manager.update_followed({a: (2, 1)})  # a new epoch: it starts over
        new = runner.fetcher.state(a)
        assert new is not state and new is not None and new.leader_epoch == 1
        manager.update_followed({a: None, c: None})  # leader 2's fetcher is left empty
        assert _by_runner(manager) == {(3, 0): [b]}
        manager.update_followed({b: None, a: (3, 2)})
        assert _by_runner(manager) == {(3, 0): [a]}
        await manager.close()
        manager.update_followed({c: (2, 0)})  # closed: nothing more
        assert manager._runners == {}
    asyncio.run(scenario())
