"""The partition side of transactions, seen by real consumers (the producer side is in
test_transactions.py): librdkafka's transactional producer commits and
aborts (two producers interleaved in the same partitions, plain records in between); the
read_committed consumers of confluent-kafka, kafka-python, aiokafka and kcat see exactly the
committed records, read_uncommitted ones everything, and control records reach none of them.
Also: ListOffsets by isolation level, a kill -9 with an aborted transaction in the log, and
the log cleaner on a compacted topic with committed and aborted transactions (aborted data
gone from disk, markers after delete.retention.ms)."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from strom.protocol.records.batch import BatchHeader
from strom.protocol.records.control import ControlType, control_type_of
from strom.protocol.records.reader import decode_batches
from strom.protocol.records.record import Record
from strom.testing import EmbeddedBroker
from tests.compat.helpers import consume_to_end, create_topic

PARTITIONS = 2


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


def txn_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "linger.ms": 5})
    producer.init_transactions(30)
    return producer


def send(producer: Producer, topic: str, prefix: str, count: int = 6) -> list[bytes]:
    values = [f"{prefix}-{i}".encode() for i in range(count)]
    for i, value in enumerate(values):
        producer.produce(topic, key=f"k{i}".encode(), value=value, partition=i % PARTITIONS)
    return values


def write_transactions(bootstrap: str, topic: str) -> tuple[list[bytes], list[bytes]]:
    """Committed and aborted transactions of two producers, interleaved; returns the values
    a read_committed reader must see (in no particular order) and the aborted ones."""
    one = txn_producer(bootstrap, f"{topic}-one")
    two = txn_producer(bootstrap, f"{topic}-two")
    plain = Producer({"bootstrap.servers": bootstrap})
    committed: list[bytes] = []
    aborted: list[bytes] = []

    one.begin_transaction()
    committed += send(one, topic, "c1")
    one.commit_transaction(30)

    one.begin_transaction()
    aborted += send(one, topic, "a1")
    one.flush(30)  # the aborted records reach the log before the abort
    two.begin_transaction()
    committed += send(two, topic, "c2")
    two.commit_transaction(30)  # committed while one's transaction is still open
    one.abort_transaction(30)

    committed += send(plain, topic, "n")
    assert plain.flush(30) == 0

    one.begin_transaction()
    committed += send(one, topic, "c3")
    one.commit_transaction(30)
    two.begin_transaction()
    aborted += send(two, topic, "a2", count=3)
    two.flush(30)
    two.abort_transaction(30)
    wait_for_markers(bootstrap, topic)
    return committed, aborted


def wait_for_markers(bootstrap: str, topic: str, timeout_s: float = 30.0) -> None:
    """Until every partition's last stable offset reaches its high watermark: EndTxn is
    answered once the decision is logged, and the markers follow asynchronously."""
    from kafka import KafkaConsumer, TopicPartition

    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    deadline = time.monotonic() + timeout_s
    while True:
        ends = []
        for isolation in ("read_committed", "read_uncommitted"):
            consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
            try:
                ends.append(consumer.end_offsets(tps))
            finally:
                consumer.close()
        if ends[0] == ends[1]:
            return
        assert time.monotonic() < deadline, f"markers not written: {ends}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def written(broker: EmbeddedBroker) -> tuple[str, list[bytes], list[bytes]]:
    topic = "txn-mixed"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    committed, aborted = write_transactions(broker.bootstrap, topic)
    return topic, committed, aborted


# -- one reader per client ---------------------------------------------------------------
def read_confluent(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    messages = consume_to_end(bootstrap, topic, PARTITIONS, **{"isolation.level": isolation})
    return [m.value() for m in messages]  # type: ignore[attr-defined]


def read_kafka_python(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                             enable_auto_commit=False, group_id=None)
    partitions = [KTopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(partitions)
    consumer.seek_to_beginning()
    ends = consumer.end_offsets(partitions)
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(
            consumer.position(tp) < ends[tp] for tp in partitions):
        for records in consumer.poll(timeout_ms=500).values():
            values.extend(r.value for r in records)
    consumer.close()
    return values


def read_aiokafka(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition

    async def run() -> list[bytes]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            partitions = [ATopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(partitions)
            await consumer.seek_to_beginning()
            ends = await consumer.end_offsets(partitions)
            values: list[bytes] = []
            deadline = time.monotonic() + 30

            async def behind() -> bool:
                return any([await consumer.position(tp) < ends[tp] for tp in partitions])

            while time.monotonic() < deadline and await behind():
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    values.extend(r.value for r in records)
            return values
        finally:
            await consumer.stop()

    return asyncio.run(run())


def read_kcat(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    out = subprocess.run(
        ["kcat", "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
         "-X", f"isolation.level={isolation}", "-f", "%s\\n"],
        capture_output=True, timeout=60, check=True)
    return out.stdout.splitlines()


READERS: dict[str, Callable[[str, str, str], list[bytes]]] = {
    "confluent-kafka": read_confluent, "kafka-python": read_kafka_python,
    "aiokafka": read_aiokafka, "kcat": read_kcat,
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_read_committed_sees_exactly_the_committed_records(
    broker: EmbeddedBroker, written: tuple[str, list[bytes], list[bytes]], reader: str
) -> None:
    topic, committed, aborted = written
    read = READERS[reader]
    assert sorted(read(broker.bootstrap, topic, "read_committed")) == sorted(committed)
    # read_uncommitted: every data record, aborted ones included; never a control record
    assert sorted(read(broker.bootstrap, topic, "read_uncommitted")) == sorted(
        committed + aborted)


def test_list_offsets_by_isolation_level(broker: EmbeddedBroker) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    topic = "txn-open"
    create_topic(broker.bootstrap, topic, 1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(3):
        plain.produce(topic, value=f"p{i}".encode(), partition=0)
    assert plain.flush(30) == 0
    producer = txn_producer(broker.bootstrap, "lso-check")
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, value=f"t{i}".encode(), partition=0)
    producer.flush(30)
    tp = KTopicPartition(topic, 0)

    def latest(isolation: str) -> int:
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level=isolation)
        try:
            return int(consumer.end_offsets([tp])[tp])
        finally:
            consumer.close()

    assert (latest("read_committed"), latest("read_uncommitted")) == (3, 7)  # LSO, HW
    producer.commit_transaction(30)
    assert (latest("read_committed"), latest("read_uncommitted")) == (8, 8)  # marker at 7


@pytest.mark.parametrize("damage", [False, True])
def test_kill_9_with_an_aborted_transaction_then_read_committed(
    tmp_path: Path, damage: bool
) -> None:
    topic = "txn-crash"
    broker = EmbeddedBroker(data_dir=tmp_path)
    broker.start()
    try:
        create_topic(broker.bootstrap, topic, PARTITIONS)
        committed, aborted = write_transactions(broker.bootstrap, topic)
        before = {p: p.read_bytes() for p in tmp_path.glob(f"{topic}-*/*.txnindex")}
        assert len(before) == PARTITIONS and all(before.values())
        broker.kill()
        if damage:  # a torn index: the segment is recovered and its index rebuilt
            for path in before:
                path.write_bytes(b"\x00\x07" + path.read_bytes()[2:])
        broker.start()
        assert sorted(read_confluent(broker.bootstrap, topic, "read_committed")) == sorted(
            committed)
        assert sorted(read_kafka_python(broker.bootstrap, topic, "read_uncommitted")) == sorted(
            committed + aborted)
        # (each log is opened, and recovered, when first used: after the reads above)
        assert {p: p.read_bytes() for p in tmp_path.glob(f"{topic}-*/*.txnindex")} == before
    finally:
        broker.close()


# -- compaction of a topic with transactions ---------------------------------------------
COMPACTED = "txn-compacted"
KEYS = 8


def disk_batches(data_dir: Path, topic: str) -> list[tuple[BatchHeader, list[Record]]]:
    """Every batch in the partition's segment files (read while the cleaner may swap)."""
    for _ in range(20):
        try:
            return [batch for path in sorted((data_dir / f"{topic}-0").glob("*.log"))
                    for batch in decode_batches(path.read_bytes())]
        except FileNotFoundError:
            time.sleep(0.05)
    raise AssertionError("the segments kept changing under the reader")


def markers_on_disk(data_dir: Path, topic: str) -> list[ControlType]:
    return [control_type_of(records[0].key) for header, records in disk_batches(data_dir, topic)
            if header.is_control and records]


def test_compaction_removes_aborted_data_then_markers(tmp_path: Path) -> None:
    broker = EmbeddedBroker(data_dir=tmp_path, config={"log.cleaner.backoff.ms": 100})
    broker.start()
    try:
        create_topic(broker.bootstrap, COMPACTED, 1, {
            "cleanup.policy": "compact", "segment.bytes": "2048",
            "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1000",
            "file.delete.delay.ms": "0"})
        one = txn_producer(broker.bootstrap, "compact-one")
        two = txn_producer(broker.bootstrap, "compact-two")
        plain = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                          "batch.size": 1000})  # batches smaller than a segment
        failures: list[KafkaError] = []
        expected: dict[bytes, bytes] = {}

        def transaction(producer: Producer, value: str, *, commit: bool) -> None:
            producer.begin_transaction()
            for key in range(KEYS):
                producer.produce(COMPACTED, key=f"k{key}".encode(), value=value.encode(),
                                 partition=0)
            producer.flush(30)
            if commit:
                producer.commit_transaction(30)
                expected.update((f"k{key}".encode(), value.encode()) for key in range(KEYS))
            else:
                producer.abort_transaction(30)

        fillers = 0

        def filler(count: int) -> None:  # plain records of their own keys: rolls segments
            nonlocal fillers
            for _ in range(count):
                key, value = f"filler-{fillers}".encode(), b"f" * 100
                plain.produce(COMPACTED, key=key, value=value, partition=0,
                              on_delivery=lambda err, _: failures.append(err) if err else None)
                expected[key] = value
                fillers += 1
            assert plain.flush(30) == 0 and not failures

        for round_ in range(4):
            transaction(one, f"committed-{round_}", commit=True)
            two.begin_transaction()  # open across one's abort and commit below
            two.produce(COMPACTED, key=b"k0", value=b"aborted-two", partition=0)
            two.flush(30)
            transaction(one, f"aborted-{round_}", commit=False)
            two.abort_transaction(30)
            filler(4)
        transaction(one, "committed-last", commit=True)
        filler(30)
        assert b"aborted" in b"".join(p.read_bytes() for p in tmp_path.glob(f"{COMPACTED}-0/*.log"))

        def read(isolation: str) -> list[tuple[bytes, bytes]]:
            messages = consume_to_end(broker.bootstrap, COMPACTED, 1,
                                      **{"isolation.level": isolation})
            return [(m.key(), m.value()) for m in messages]  # type: ignore[attr-defined]

        def settled(check: Callable[[], bool]) -> None:
            deadline = time.monotonic() + 45
            while not check():
                assert time.monotonic() < deadline, markers_on_disk(tmp_path, COMPACTED)
                filler(20)  # new dirty data: the cleaner runs another pass
                time.sleep(0.3)

        def aborted_gone() -> bool:
            return not any(b"aborted" in (r.value or b"")
                           for _, records in disk_batches(tmp_path, COMPACTED)
                           for r in records)

        settled(aborted_gone)
        # Only the latest committed value of each key is left, for both isolation levels.
        settled(lambda: sorted(read("read_uncommitted")) == sorted(expected.items()))
        assert sorted(read("read_committed")) == sorted(expected.items())
        # After delete.retention.ms the markers of transactions without data left go too. Two
        # stay, as in Kafka: each ends a transaction whose data batch is a live producer's
        # last (kept, emptied, for its sequence numbers): two's abort (with its index entry)
        # and one's last commit.
        settled(lambda: markers_on_disk(tmp_path, COMPACTED) == [ControlType.ABORT,
                                                                 ControlType.COMMIT])
        batches = disk_batches(tmp_path, COMPACTED)
        aborter = next(h.producer_id for h, rs in batches if h.is_control
                       and control_type_of(rs[0].key) is ControlType.ABORT)
        assert [(h.is_control, len(rs)) for h, rs in batches if h.producer_id == aborter] == [
            (False, 0), (True, 1)]
        assert sum(p.stat().st_size for p in tmp_path.glob(f"{COMPACTED}-0/*.txnindex")) == 34
        assert sorted(read("read_committed")) == sorted(expected.items())
        assert sorted(read("read_uncommitted")) == sorted(expected.items())
    finally:
        broker.close()
