"""The member's reaction to its group coordinator moving (NOT_COORDINATOR → FindCoordinator
again), against two fake brokers.

With one real broker the coordinator of a group never moves (it is the leader of the group's
``__consumer_offsets`` partition, always that broker), so this is a unit test of the member
state machine: broker ``a`` (node 0) leads the topic's partitions, broker ``b`` (node 1) leads
none, and the group's coordinator is whichever :class:`MovableCoordinator` says. The other
one answers the group APIs NOT_COORDINATOR, as a Kafka broker does after the group's offsets
partition moved away from it; the group's state moves with it, as Kafka's coordinator loads it
from ``__consumer_offsets``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from strom.client import Consumer, Producer
from strom.protocol.versions import SUPPORTED, ApiKey
from tests.client.fake_broker import GROUP_API_VERSIONS, FakeBroker

NOT_COORDINATOR = 16
MEMBER_ID_REQUIRED = 79
GROUP = "g"


class MovableCoordinator:
    """One-member classic group behind two fake brokers (see the module doc).

    ``node``: the node that coordinates the group; ``stale_answers``: FindCoordinator answers
    given before the true one (a lookup that raced the move)."""

    def __init__(self, a: FakeBroker, b: FakeBroker) -> None:
        self.brokers = {0: a, 1: b}
        self.node = 0
        self.stale_answers: list[int] = []
        self.generation = 0
        self.assignment = b""
        #: (node, api key, error code) of every group request, in order.
        self.seen: list[tuple[int, int, int]] = []
        for node, broker in self.brokers.items():
            broker.hooks[ApiKey.FIND_COORDINATOR] = self._find
            for key in (ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT,
                        ApiKey.LEAVE_GROUP, ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH):
                broker.hooks[key] = self._on(node)

    async def _find(self, key: int, version: int, request: Any) -> dict[str, Any]:
        node = self.stale_answers.pop(0) if self.stale_answers else self.node
        found = {"error_code": 0, "error_message": None, "node_id": node,
                 "host": "127.0.0.1", "port": self.brokers[node].port}
        if version >= 4:
            return {"coordinators": [{**found, "key": k} for k in request.coordinator_keys]}
        return found

    def _on(self, node: int) -> Callable[[int, int, Any], Awaitable[Any]]:
        async def hook(key: int, version: int, request: Any) -> Any:
            if node != self.node:
                self.seen.append((node, key, NOT_COORDINATOR))
                return self._not_coordinator(key, version, request)
            self.seen.append((node, key, 0))
            return self._answer(key, version, request)
        return hook

    @staticmethod
    def _not_coordinator(key: int, version: int, request: Any) -> dict[str, Any]:
        if key == ApiKey.OFFSET_COMMIT:
            return {"topics": [{"name": t.name, "partitions": [
                {"partition_index": p.partition_index, "error_code": NOT_COORDINATOR}
                for p in t.partitions]} for t in request.topics]}
        if key == ApiKey.OFFSET_FETCH and version >= 8:
            return {"groups": [{"group_id": g.group_id, "error_code": NOT_COORDINATOR,
                                "topics": []} for g in request.groups]}
        return {"error_code": NOT_COORDINATOR}

    def _answer(self, key: int, version: int, request: Any) -> Any:
        if key == ApiKey.JOIN_GROUP:
            if not request.member_id:
                return {"error_code": MEMBER_ID_REQUIRED, "member_id": "m-1",
                        "generation_id": -1}
            self.generation += 1
            [protocol] = request.protocols[:1]
            return {"error_code": 0, "generation_id": self.generation,
                    "protocol_type": "consumer", "protocol_name": protocol.name,
                    "leader": request.member_id, "member_id": request.member_id,
                    "members": [{"member_id": request.member_id,
                                 "metadata": protocol.metadata}]}
        if key == ApiKey.SYNC_GROUP:
            self.assignment = bytes(request.assignments[0].assignment)
            return {"error_code": 0, "protocol_type": "consumer",
                    "protocol_name": "range", "assignment": self.assignment}
        if key in (ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP):
            return {"error_code": 0}
        return None  # offsets: the fake broker's own (shared) group store answers


def run_with_two_brokers(test: Callable[[FakeBroker, MovableCoordinator], Awaitable[None]]
                         ) -> None:
    async def main() -> None:
        versions = {**SUPPORTED, **GROUP_API_VERSIONS}
        a, b = await FakeBroker(versions).start(), await FakeBroker(versions).start()
        b.topics, b.groups = a.topics, a.groups  # one cluster: b leads no partition
        a.other_brokers = [{"node_id": 1, "host": "127.0.0.1", "port": b.port}]

        async def metadata_of_a(key: int, version: int, request: Any) -> dict[str, Any]:
            return a._api_3(version, request)

        b.hooks[ApiKey.METADATA] = metadata_of_a
        a.create("t", 2)
        try:
            await asyncio.wait_for(test(a, MovableCoordinator(a, b)), 60)
        finally:
            await a.stop()
            await b.stop()

    asyncio.run(main())


def new_consumer(a: FakeBroker) -> Consumer:
    return Consumer(a.bootstrap, group_id=GROUP, enable_auto_commit=False,
                    auto_offset_reset="earliest", session_timeout_ms=6000,
                    heartbeat_interval_ms=100, max_wait_ms=50,
                    partition_assignment_strategy="range")


async def poll_until_assigned(consumer: Consumer, count: int) -> list[Any]:
    """Poll until ``count`` partitions are assigned; the records polled meanwhile."""
    records: list[Any] = []
    for _ in range(200):
        records += await consumer.poll(0.05)
        if len(consumer.assignment()) == count:
            return records
    raise AssertionError(f"assignment {consumer.assignment()} never reached {count}")


def test_join_answered_not_coordinator_finds_the_coordinator_again_and_joins_there() -> None:
    async def test(a: FakeBroker, group: MovableCoordinator) -> None:
        group.node, group.stale_answers = 1, [0]  # the first lookup still names node 0
        async with new_consumer(a) as consumer:
            consumer.subscribe(["t"])
            await poll_until_assigned(consumer, 2)
            joins = [(node, code) for node, key, code in group.seen
                     if key == ApiKey.JOIN_GROUP]
            assert joins[0] == (0, NOT_COORDINATOR)
            assert all(node == 1 for node, _ in joins[1:]) and joins[-1] == (1, 0)

    run_with_two_brokers(test)


def test_a_moved_coordinator_is_found_again_without_a_rebalance() -> None:
    async def test(a: FakeBroker, group: MovableCoordinator) -> None:
        async with Producer(a.bootstrap) as producer:
            for i in range(4):
                await producer.send("t", b"v%d" % i, partition=i % 2)
        async with new_consumer(a) as consumer:
            consumer.subscribe(["t"])
            records = await poll_until_assigned(consumer, 2)
            generation = group.generation
            group.node = 1  # the group's offsets partition moved to node 1
            moved_at = len(group.seen)
            for _ in range(100):
                records += await consumer.poll(0.05)
                if len(records) == 4 and any(
                        s[:2] == (1, ApiKey.HEARTBEAT) for s in group.seen[moved_at:]):
                    break
            after = group.seen[moved_at:]
            # The heartbeat to node 0 was answered NOT_COORDINATOR; the next went to node 1.
            assert (0, ApiKey.HEARTBEAT, NOT_COORDINATOR) in after
            assert (1, ApiKey.HEARTBEAT, 0) in after
            # Kafka's member only marks the coordinator unknown: no rejoin, nothing revoked.
            assert not any(key == ApiKey.JOIN_GROUP for _, key, _ in after)
            assert group.generation == generation and len(consumer.assignment()) == 2
            assert sorted((r.partition, r.offset) for r in records) == [
                (0, 0), (0, 1), (1, 0), (1, 1)]
            await consumer.commit()  # goes to the new coordinator
            assert (1, ApiKey.OFFSET_COMMIT, 0) in group.seen[moved_at:]
            assert a.groups[GROUP].offsets == {("t", 0): (2, ""), ("t", 1): (2, "")}

    run_with_two_brokers(test)
