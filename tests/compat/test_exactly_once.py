"""Exactly-once consume-transform-produce across crashes: the application
(``tests/compat/eos_worker.py``: confluent-kafka's read_committed consumer in a group and
transactional producer with ``send_offsets_to_transaction``) is killed with SIGKILL at random
points many times and restarted; a read_committed reader of the output then sees every input
value exactly once, in each partition's (key's) input order.

The kill points come from a seeded RNG (``EOS_SEED`` in the environment replays a run); a
failure reports the seed."""

from __future__ import annotations

import itertools
import os
import random
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from strom.testing import EmbeddedBroker
from tests.compat.helpers import consume_to_end, create_topic

PARTITIONS = 3
PER_PARTITION = 1000
KILLS = 12
SOURCE, SINK = "eos-in", "eos-out"
WORKER = Path(__file__).with_name("eos_worker.py")


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(config={"group.initial.rebalance.delay.ms": 0}) as b:
        yield b


class Worker:
    """One incarnation of the application, its stderr kept in ``log``."""

    def __init__(self, broker: EmbeddedBroker, seed: int, log: Path, *, stay: bool) -> None:
        self.log = log
        with log.open("wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, str(WORKER), broker.bootstrap, SOURCE, SINK, str(seed),
                 *(["stay"] if stay else [])],
                stdout=subprocess.PIPE, stderr=err)

    def wait_ready(self, timeout: float) -> bool:
        """Whether it printed ``ready`` (init_transactions done) within ``timeout``."""
        stdout = self.process.stdout
        assert stdout is not None
        if not select.select([stdout], [], [], timeout)[0]:
            return False
        return stdout.readline().strip() == b"ready"

    def stderr_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def output_progress(broker: EmbeddedBroker) -> int:
    """Records and markers written to the output so far (the sum of its high watermarks)."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "eos-progress"})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(SINK, p), 10)[1]
                   for p in range(PARTITIONS))
    finally:
        consumer.close()


def test_consume_transform_produce_is_exactly_once_across_kill_9(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    seed = int(os.environ.get("EOS_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    create_topic(broker.bootstrap, SOURCE, PARTITIONS)
    create_topic(broker.bootstrap, SINK, PARTITIONS)
    inputs = {p: [f"p{p}-{i:04d}".encode() for i in range(PER_PARTITION)]
              for p in range(PARTITIONS)}
    plain = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    # New input before each incarnation, so every one has work whatever the machine's speed
    # (all of it up front, a fast machine finished it within a few incarnations).
    chunk = -(-PER_PARTITION // (KILLS + 1))

    def feed(run: int) -> None:
        for i in range(run * chunk, min((run + 1) * chunk, PER_PARTITION)):
            for p in range(PARTITIONS):
                plain.produce(SOURCE, key=f"k{p}".encode(), value=inputs[p][i], partition=p)
        assert plain.flush(30) == 0

    progress = [0]
    for kill in range(KILLS):
        feed(kill)
        worker = Worker(broker, rng.randrange(1 << 30), tmp_path / f"worker-{kill}.log",
                        stay=True)
        if rng.random() < 0.25:  # anywhere, start-up and init_transactions included
            time.sleep(rng.uniform(0.1, 1.0))
        else:  # while it consumes and commits transactions
            assert worker.wait_ready(30), f"seed {seed}: {worker.stderr_tail()}"
            time.sleep(rng.uniform(0.0, 1.2))
        assert worker.process.poll() is None, f"seed {seed}: exited: {worker.stderr_tail()}"
        worker.process.kill()
        worker.process.wait()
        progress.append(output_progress(broker))
    feed(KILLS)
    worker = Worker(broker, rng.randrange(1 << 30), tmp_path / "worker-last.log", stay=False)
    try:
        worker.process.wait(60)
    except subprocess.TimeoutExpired:
        worker.process.kill()
        worker.process.wait()
    assert worker.process.returncode == 0, f"seed {seed}: {worker.stderr_tail()}"
    # The kills interrupted a worker that had written something, more than a few times.
    interrupted = sum(after > before for before, after in itertools.pairwise(progress))
    assert interrupted >= 3, (seed, progress)

    messages = consume_to_end(broker.bootstrap, SINK, PARTITIONS,
                              **{"isolation.level": "read_committed"})
    output: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for message in messages:
        partition = message.partition()  # type: ignore[attr-defined]
        assert message.key() == f"k{partition}".encode()  # type: ignore[attr-defined]
        output[partition].append(message.value())  # type: ignore[attr-defined]
    for p in range(PARTITIONS):
        expected = [b"out:" + value for value in inputs[p]]
        got = output[p]
        first_difference = next(
            (i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b), None)
        assert got == expected, (
            f"seed {seed}, partition {p}: {len(got)} values, {len(set(got))} distinct, "
            f"{len(set(expected) - set(got))} missing, first difference at "
            f"{first_difference}")
