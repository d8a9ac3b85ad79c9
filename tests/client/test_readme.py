"""The consumer examples of ``src/strom/client/README.md``, run as written against the session
broker. Only the address, the topic and the group are replaced (a fresh topic and group per
test on the shared broker); the harness supplies what the prose says is around each snippet
(``handle``, a ``consumer`` with ``enable_auto_commit=False``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import textwrap
import uuid
from pathlib import Path
from typing import Any

from strom.client import AdminClient, Consumer, Producer
from strom.common.types import TopicPartition

README = Path(__file__).resolve().parents[2] / "src" / "strom" / "client" / "README.md"


def code_blocks() -> list[str]:
    """Every indented block of the README (blank lines inside a block kept)."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in README.read_text("utf-8").splitlines():
        if line.startswith("    "):
            if current is None:
                current = []
                blocks.append(current)
            current.append(line[4:])
        elif line.strip() and current is not None:
            current = None
        elif current is not None:
            current.append("")
    return ["\n".join(b).strip() + "\n" for b in blocks]


def block_with(marker: str) -> str:
    [block] = [b for b in code_blocks() if marker in b]
    return block


class Example:
    """One README snippet, its names replaced, run as the body of a coroutine."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.topic = f"orders-{uuid.uuid4().hex[:8]}"
        self.group = f"billing-{uuid.uuid4().hex[:8]}"
        self.printed: list[tuple[Any, ...]] = []

    def source(self, marker: str) -> str:
        return (block_with(marker).replace("127.0.0.1:9092", self.bootstrap)
                .replace('"orders"', f'"{self.topic}"').replace('"billing"', f'"{self.group}"'))

    async def run(self, marker: str, names: dict[str, Any]) -> dict[str, Any]:
        """Run the block containing ``marker``; its local names afterwards."""
        scope: dict[str, Any] = {"print": lambda *a: self.printed.append(a), **names}
        body = textwrap.indent(self.source(marker) + "return locals()\n", "    ")
        exec(f"async def example():\n{body}", scope)
        return dict(await scope["example"]())

    async def setup(self, values: list[bytes]) -> None:
        async with AdminClient(self.bootstrap) as admin:
            await admin.create_topic(self.topic, 1, 1)
        await self.produce(values)

    async def produce(self, values: list[bytes]) -> None:
        async with Producer(self.bootstrap) as producer:
            for value in values:
                await producer.send(self.topic, value, partition=0)
            await producer.flush()

    async def committed(self) -> Any:
        async with Consumer(self.bootstrap, group_id=self.group) as consumer:
            return (await consumer.committed([TopicPartition(self.topic, 0)])).popitem()[1]

    def consumer(self) -> Consumer:
        return Consumer(self.bootstrap, group_id=self.group, enable_auto_commit=False,
                        auto_offset_reset="earliest", heartbeat_interval_ms=300,
                        max_wait_ms=100)


def run(coro: Any) -> None:
    asyncio.run(asyncio.wait_for(coro, 60))


class Enough(Exception):
    """Raised by the harness's ``handle`` to leave the README's endless loop."""


def test_the_auto_commit_example_commits_what_the_loop_handled(broker: Any) -> None:
    example = Example(broker.bootstrap)
    handled: list[Any] = []

    def handle(value: Any) -> None:
        handled.append(value)
        if len(handled) == 3:
            raise Enough

    async def main() -> None:
        await example.setup([json.dumps({"n": i}).encode() for i in range(5)])
        with contextlib.suppress(Enough):
            await example.run("async for record in consumer", {"handle": handle})
        # Leaving ``async with`` closed the consumer, which auto-committed what poll returned
        # (poll hands out records in batches, so at least the three handled).
        committed = await example.committed()
        assert committed is not None and 3 <= committed.offset <= 5

    run(main())
    assert handled == [{"n": 0}, {"n": 1}, {"n": 2}]


def test_the_commit_styles_example(broker: Any) -> None:
    example = Example(broker.bootstrap)

    async def main() -> None:
        await example.setup([])
        async with example.consumer() as consumer:
            consumer.subscribe([example.topic])
            while not consumer.assignment():  # a new group's first join takes a while
                assert not await consumer.poll(0.2)
            await example.produce([b"a", b"b", b"c"])
            found = await example.run("await consumer.commit()", {
                "consumer": consumer, **await imports(example)})
            assert [r.value for r in found["records"]] == [b"a", b"b", b"c"]
        # close() waited for commit_async, which committed the position (3) after the
        # explicit 42, and called back with no error.
        [(offsets, error)] = example.printed
        assert error is None and [o.offset for o in offsets.values()] == [3]
        assert (await example.committed()).offset == 3

    run(main())


def test_the_rebalance_listener_example_commits_on_revoke(broker: Any) -> None:
    example = Example(broker.bootstrap)

    async def main() -> None:
        await example.setup([b"a", b"b"])
        async with example.consumer() as consumer:
            await example.run("class CommitOnRevoke", {"consumer": consumer})
            got: list[Any] = []
            for _ in range(100):
                got += await consumer.poll(0.2)
                if len(got) == 2:
                    break
            assert example.printed == [("now reading", [TopicPartition(example.topic, 0)])]
            assert await example.committed() is None
        # close() revoked the partition: the listener committed the position.
        assert (await example.committed()).offset == 2

    run(main())


def test_the_transactions_example_copies_under_the_consumers_group_metadata(
        broker: Any) -> None:
    example = Example(broker.bootstrap)
    source, sink, group = f"in-{example.topic}", f"out-{example.topic}", example.group

    async def main() -> None:
        async with AdminClient(example.bootstrap) as admin:
            for name in (source, sink):
                await admin.create_topic(name, 1, 1)
        async with Producer(example.bootstrap) as producer:
            for value in (b"x", b"y", b"z"):
                await producer.send(source, value, partition=0)
            await producer.flush()
        block = (example.source("consumer.group_metadata()")
                 .replace('"in"', f'"{source}"').replace('"out"', f'"{sink}"')
                 .replace('"copier"', f'"{group}"')
                 .replace('"copier-1"', f'"{group}-1"'))
        scope: dict[str, Any] = {**await imports(example), "Producer": Producer,
                                 "AdminClient": AdminClient,
                                 "Consumer": Consumer, "TopicPartition": TopicPartition}
        exec(f"async def example():\n{textwrap.indent(block, '    ')}", scope)
        await scope["example"]()
        async with Consumer(example.bootstrap, group_id=group,
                            isolation_level="read_committed",
                            auto_offset_reset="earliest", max_wait_ms=100) as check:
            assert (await check.committed([TopicPartition(source, 0)])).popitem()[1].offset == 3
            check.assign([TopicPartition(sink, 0)])
            await check.seek_to_beginning()
            copied: list[Any] = []
            for _ in range(100):
                copied += [r.value for r in await check.poll(0.2)]
                if len(copied) == 3:
                    break
            assert copied == [b"x", b"y", b"z"]

    run(main())


async def imports(example: Example) -> dict[str, Any]:
    """The names the README's first consumer block imports, by running its import lines."""
    lines = [line for line in block_with("async for record in consumer").splitlines()
             if line.startswith(("from ", "import "))]
    assert lines, "the README shows its imports"
    scope: dict[str, Any] = {}
    exec("\n".join(lines), scope)
    return {k: v for k, v in scope.items() if not k.startswith("__")}


def test_every_consumer_block_is_covered() -> None:
    markers = ("async for record in consumer", "await consumer.commit()", "class CommitOnRevoke",
               "consumer.group_metadata()")
    consumer_blocks = [b for b in code_blocks() if "Consumer(" in b or "consumer." in b]
    assert all(any(m in b for m in markers) for b in consumer_blocks), consumer_blocks

