"""How long one metadata write holds the event loop on the file-backed store, as the
metadata grows.

    PYTHONPATH=src python bench/metadata_write_bench.py [--topics 15000] [--batch 100]

Fills a fresh ``LocalMetadataStore`` with ``--topics`` one-partition topics (synchronous
writes of ``--batch``), then makes two ``write_async`` writes of ``--batch`` topics while a
task takes turns of the loop as fast as it can: a journal write, and one forced to rewrite
the whole file (as when the journal has grown as large as the file). Reported: each write's
time and the longest stretch the loop was held (the longest gap between the task's turns),
against the synchronous ``_rewrite`` of the same state. The collector runs with the
broker's thresholds after a freeze (``strom broker`` does the same at start).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from strom.cli.broker_cmd import GC_THRESHOLDS
from strom.metadata.changes import PutTopic
from strom.metadata.image import BrokerInfo, PartitionInfo, TopicInfo
from strom.metadata.local import LocalMetadataStore


def _topic(name: str) -> PutTopic:
    return PutTopic(TopicInfo(name, uuid.uuid4(), (PartitionInfo(0, 0, 0, (0,), (0,)),),
                              {"retention.ms": "1000"}))


async def _write(store: LocalMetadataStore, names: list[str], rewrite: bool
                 ) -> tuple[float, float]:
    """(the write's seconds, the longest the loop was held meanwhile)."""
    if rewrite:
        store._journal_bytes = 1 << 62  # the next write rewrites the file
    gaps: list[float] = []
    done = False

    async def turns() -> None:
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.ensure_future(turns())
    await asyncio.sleep(0)
    began = time.perf_counter()
    await store.write_async(store.image.epoch, [_topic(n) for n in names])
    took = time.perf_counter() - began
    done = True
    await ticker
    return took, max(gaps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=15_000)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="metadata-write-bench-"))
    try:
        store = LocalMetadataStore(data_dir, BrokerInfo(0, "127.0.0.1", 9092), "bench")
        for first in range(0, args.topics, args.batch):
            store.write(store.image.epoch, [_topic(f"t{i}") for i in range(
                first, min(args.topics, first + args.batch))])
        gc.collect()
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        print(f"{len(store.image.topics)} topics, file {store._snapshot_bytes:,} bytes")
        for kind, rewrite in (("journal line", False), ("whole file", True)):
            names = [f"{kind[0]}{i}" for i in range(args.batch)]
            took, held = asyncio.run(_write(store, names, rewrite))
            print(f"write_async ({kind}): {took * 1000:.0f} ms, loop held at most "
                  f"{held * 1000:.1f} ms")
        began = time.perf_counter()
        store._rewrite(store.image, store._next_producer_id)
        print(f"synchronous _rewrite (the loop held throughout): "
              f"{(time.perf_counter() - began) * 1000:.0f} ms")
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
