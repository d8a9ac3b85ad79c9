"""Broker time per KIP-848 heartbeat, in-process (the coordinator over the in-memory
partition writer; no sockets): joins of ``--members`` members to one group over ``--topics``
topics of ``--partitions`` partitions each, then steady heartbeats.

    python bench/consumer_group_bench.py [--members 200] [--topics 20] [--partitions 20]
                                         [--rounds 5]

Prints µs per join and per steady heartbeat (median of ``--rounds`` passes over every
member). What it measures is the coordinator's Python: validation, subscription resolution,
the target assignment when the group epoch moves, reconciliation and records.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

from strom.common.clock import ManualClock
from strom.coordinator.group.consumer.groups import HeartbeatArgs, HeartbeatResult
from strom.coordinator.group.coordinator import GroupCoordinator
from strom.coordinator.group.model import GroupSettings
from strom.metadata.image import PartitionInfo, TopicInfo
from strom.testing.partition_writer import MemoryPartitionWriter
from strom.testing.scheduler import ManualScheduler


def topics(count: int, partitions: int) -> dict[str, TopicInfo]:
    return {f"t{i}": TopicInfo(f"t{i}", uuid.UUID(int=i + 1), tuple(
        PartitionInfo(p, 0, 0, (0,), (0,)) for p in range(partitions))) for i in range(count)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=200)
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    clock = ManualClock()
    writer = MemoryPartitionWriter(loop)
    image = topics(args.topics, args.partitions)
    coordinator = GroupCoordinator(writer, ManualScheduler(clock), clock,
                                   GroupSettings(partitions=1), loop=loop,
                                   topics=lambda: image)
    coordinator.runtime.on_become_leader(0, 0)
    loop.run_until_complete(coordinator.runtime.wait_loaded(0))
    names = tuple(image)
    epochs: dict[str, int] = {}

    def beat(member: str, epoch: int, **extra: Any) -> HeartbeatResult:
        out: list[HeartbeatResult] = []
        fields: dict[str, Any] = {
            "group_id": "g", "member_id": member, "member_epoch": epoch, "instance_id": None,
            "rack_id": None, "rebalance_timeout_ms": -1, "subscribed_topic_names": None,
            "subscribed_topic_regex": None, "server_assignor": None, "owned": None}
        fields.update(extra)
        coordinator.consumer_heartbeat(HeartbeatArgs(**fields), out.append)
        for _ in range(20):
            if out:
                break
            loop.run_until_complete(asyncio.sleep(0))
        assert out and out[0].error == 0, out
        return out[0]

    start = time.perf_counter()
    for i in range(args.members):
        answer = beat(f"m{i}", 0, rebalance_timeout_ms=30000, subscribed_topic_names=names,
                      owned={})
        epochs[f"m{i}"] = answer.member_epoch
    join_us = (time.perf_counter() - start) / args.members * 1e6
    passes = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        for member in epochs:
            epochs[member] = beat(member, epochs[member]).member_epoch
        passes.append((time.perf_counter() - start) / len(epochs) * 1e6)
    print(f"members {args.members}, {args.topics} topics x {args.partitions} partitions: "
          f"join {join_us:.0f} µs, heartbeat {statistics.median(passes):.0f} µs "
          f"(passes: {', '.join(f'{p:.0f}' for p in passes)})")


if __name__ == "__main__":
    main()
