"""Incremental fetch sessions (KIP-227) on the wire: raw requests for each state of a session,
then the real clients (kafka-python opens sessions; librdkafka and aiokafka fetch without)."""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from strom.broker.fetch_sessions import next_epoch
from strom.common.errors import ErrorCode
from strom.protocol import fast
from strom.protocol.records.reader import decode_batches
from strom.protocol.versions import ApiKey
from strom.testing import EmbeddedBroker
from tests.broker.raw import RawClient
from tests.broker.test_data_path import batch, create, produce
from tests.broker.wire_tap import Exchange, WireTap

NOT_FOUND = ErrorCode.FETCH_SESSION_ID_NOT_FOUND  # type: ignore[attr-defined]
BAD_EPOCH = ErrorCode.INVALID_FETCH_SESSION_EPOCH  # type: ignore[attr-defined]
TOPIC_ID_ERROR = ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR  # type: ignore[attr-defined]

Wanted = dict[Any, list[tuple[int, int]]]  # topic name (v12) or id (v13+) -> (partition, offset)


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture
def client(broker: EmbeddedBroker) -> Iterator[RawClient]:
    c = RawClient(broker.bootstrap, timeout=30)
    yield c
    c.close()


def fetch(client: RawClient, session_id: int, epoch: int, wanted: Wanted,
          forgotten: Wanted | None = None, version: int = 12, max_wait_ms: int = 0,
          replica_id: int = -1) -> Any:
    by_id = version >= 13
    return client.call(ApiKey.FETCH, version, {
        "replica_id": replica_id, "max_wait_ms": max_wait_ms, "min_bytes": 1,
        "max_bytes": 1 << 20, "isolation_level": 0, "session_id": session_id,
        "session_epoch": epoch,
        "topics": [{("topic_id" if by_id else "topic"): topic, "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": offset,
             "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}
            for p, offset in parts]} for topic, parts in wanted.items()],
        "forgotten_topics_data": [
            {("topic_id" if by_id else "topic"): topic, "partitions": [p for p, _ in parts]}
            for topic, parts in (forgotten or {}).items()],
        "rack_id": ""})


def answered(resp: Any) -> dict[tuple[Any, int], Any]:
    """(topic name or id, partition) -> partition data of a Fetch response."""
    return {(getattr(t, "topic_id", None) or t.topic, p.partition_index): p
            for t in resp.responses for p in t.partitions}


def values(partition: Any) -> list[bytes]:
    return [r.value for _, rs in decode_batches(partition.records) for r in rs]


def test_session_lifecycle(client: RawClient) -> None:
    """New session, idle incremental, changed partitions only, update, add, forget, close."""
    create(client, "fs-life", partitions=3)
    create(client, "fs-other")
    produce(client, "fs-life", batch([b"a"]), partition=0)
    full = fetch(client, 0, 0, {"fs-life": [(0, 0), (1, 0), (2, 0)]})
    assert full.error_code == 0 and full.session_id > 0
    parts = answered(full)
    assert sorted(parts) == [("fs-life", 0), ("fs-life", 1), ("fs-life", 2)]
    assert values(parts[("fs-life", 0)]) == [b"a"]
    sid = full.session_id

    # The client moves partition 0 past what it read: nothing changed, no partitions at all.
    idle = fetch(client, sid, 1, {"fs-life": [(0, 1)]})
    assert (idle.error_code, idle.session_id, idle.responses) == (0, sid, [])

    produce(client, "fs-life", batch([b"b"]), partition=1)
    changed = fetch(client, sid, 2, {})  # partition 1's cached fetch offset is still 0
    parts = answered(changed)
    assert list(parts) == [("fs-life", 1)]
    assert values(parts[("fs-life", 1)]) == [b"b"] and parts[("fs-life", 1)].high_watermark == 1

    # The client moves its offset past what it read: no new data, same high watermark.
    moved = fetch(client, sid, 3, {"fs-life": [(1, 1)]})
    assert moved.responses == []
    # A partition moved back to 0 has records again: it is answered.
    again = fetch(client, sid, 4, {"fs-life": [(0, 0)]})
    assert list(answered(again)) == [("fs-life", 0)]
    assert fetch(client, sid, 5, {"fs-life": [(0, 1)]}).responses == []

    # Added partitions are always in the next answer (nothing was sent for them yet).
    added = fetch(client, sid, 6, {"fs-other": [(0, 0)]})
    assert list(answered(added)) == [("fs-other", 0)]
    assert answered(added)[("fs-other", 0)].high_watermark == 0

    # Forgotten partitions are no longer read, even when they get data.
    assert fetch(client, sid, 7, {}, forgotten={"fs-life": [(2, 0)]}).responses == []
    produce(client, "fs-life", batch([b"c"]), partition=2)
    assert fetch(client, sid, 8, {}).responses == []

    # Epoch -1 with the session's id closes it and answers in full, without a session.
    closed = fetch(client, sid, -1, {"fs-life": [(2, 0)]})
    assert closed.session_id == 0 and values(answered(closed)[("fs-life", 2)]) == [b"c"]
    gone = fetch(client, sid, 9, {})
    assert (gone.error_code, gone.session_id, gone.responses) == (NOT_FOUND, 0, [])


def test_session_errors(client: RawClient) -> None:
    create(client, "fs-err")
    unknown = fetch(client, 12345, 1, {"fs-err": [(0, 0)]})
    assert (unknown.error_code, unknown.session_id, unknown.responses) == (NOT_FOUND, 0, [])
    sid = fetch(client, 0, 0, {"fs-err": [(0, 0)]}).session_id
    assert sid > 0
    wrong = fetch(client, sid, 5, {})
    assert (wrong.error_code, wrong.responses) == (BAD_EPOCH, [])
    # A rejected epoch does not advance the session: epoch 1 is still expected.
    assert fetch(client, sid, 1, {}).error_code == 0
    assert fetch(client, sid, 1, {}).error_code == BAD_EPOCH  # a replayed request
    # Opened with names (v12), continued with ids (v13): FETCH_SESSION_TOPIC_ID_ERROR.
    assert fetch(client, sid, 2, {}, version=13).error_code == TOPIC_ID_ERROR
    # A new full request (epoch 0) naming the session replaces it by a new one.
    renewed = fetch(client, sid, 0, {"fs-err": [(0, 0)]})
    assert renewed.session_id not in (0, sid)
    assert fetch(client, sid, 2, {}).error_code == NOT_FOUND
    # Emptying a session with forgotten_topics_data closes it: the answer has id 0.
    emptied = fetch(client, renewed.session_id, 1, {}, forgotten={"fs-err": [(0, 0)]})
    assert (emptied.error_code, emptied.session_id) == (0, 0)
    assert fetch(client, renewed.session_id, 2, {}).error_code == NOT_FOUND


def test_session_by_topic_id(client: RawClient) -> None:
    """v13+ sessions name topics by id; partitions of a deleted topic answer UNKNOWN_TOPIC_ID."""
    create(client, "fs-ids", partitions=2)
    md = client.call(ApiKey.METADATA, 12, {"topics": [{"name": "fs-ids", "topic_id": None}],
                                           "allow_auto_topic_creation": False,
                                           "include_topic_authorized_operations": False})
    tid = md.topics[0].topic_id
    full = fetch(client, 0, 0, {tid: [(0, 0), (1, 0)]}, version=16)
    sid = full.session_id
    assert sid > 0 and sorted(answered(full)) == [(tid, 0), (tid, 1)]
    assert fetch(client, sid, 1, {}, version=16).responses == []
    produce(client, "fs-ids", batch([b"x"]), partition=1)
    parts = answered(fetch(client, sid, 2, {}, version=16))
    assert list(parts) == [(tid, 1)] and values(parts[(tid, 1)]) == [b"x"]
    assert fetch(client, sid, 3, {}, version=12).error_code == TOPIC_ID_ERROR
    resp = client.call(ApiKey.DELETE_TOPICS, 4, {"topic_names": ["fs-ids"], "timeout_ms": 5000})
    assert resp.responses[0].error_code == 0
    parts = answered(fetch(client, sid, 3, {}, version=16))
    assert {p.error_code for p in parts.values()} == {ErrorCode.UNKNOWN_TOPIC_ID}  # type: ignore[attr-defined]
    assert sorted(parts) == [(tid, 0), (tid, 1)]


def parked_while(call: Callable[[], Any], event: Callable[[], object]) -> dict[str, Any]:
    """Run ``call`` (a parked fetch) on a thread, ``event`` half a second later; the call's
    answer (``resp``) and how long it took (``elapsed``)."""
    result: dict[str, Any] = {}

    def park() -> None:
        begun = time.monotonic()
        result["resp"] = call()
        result["elapsed"] = time.monotonic() - begun

    thread = threading.Thread(target=park)
    thread.start()
    time.sleep(0.5)
    event()
    thread.join(60)
    return result


def test_incremental_request_parks_and_wakes(broker: EmbeddedBroker, client: RawClient) -> None:
    """An incremental request with nothing new waits like a full one, and wakes with data."""
    create(client, "fs-park", partitions=2)
    sid = fetch(client, 0, 0, {"fs-park": [(0, 0), (1, 0)]}).session_id
    start = time.monotonic()
    assert fetch(client, sid, 1, {}, max_wait_ms=400).responses == []
    assert time.monotonic() - start >= 0.35

    def append() -> None:
        producer = RawClient(broker.bootstrap)
        produce(producer, "fs-park", batch([b"wake"]), partition=1)
        producer.close()

    result = parked_while(lambda: fetch(client, sid, 2, {}, max_wait_ms=20_000), append)
    assert result["elapsed"] < 10
    parts = answered(result["resp"])
    assert list(parts) == [("fs-park", 1)] and values(parts[("fs-park", 1)]) == [b"wake"]
    # The cache was updated from the parked read that was sent: past the record, nothing new.
    assert fetch(client, sid, 3, {"fs-park": [(1, 1)]}).responses == []


def test_data_beyond_max_bytes_rotates(client: RawClient) -> None:
    """Partitions that returned records move to the end of the session, so a response limited
    by max_bytes serves the others on the next request."""
    create(client, "fs-rot", partitions=2)
    for p in (0, 1):
        produce(client, "fs-rot", batch([bytes(300)]), partition=p)
    sid = fetch(client, 0, 0, {"fs-rot": [(0, 1), (1, 1)]}).session_id
    first = client.call(ApiKey.FETCH, 12, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1,
        "isolation_level": 0, "session_id": sid, "session_epoch": 1,
        "topics": [{"topic": "fs-rot", "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": 0,
             "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}
            for p in (0, 1)]}], "forgotten_topics_data": [], "rack_id": ""})
    with_data = [k for k, p in answered(first).items() if values(p)]
    assert with_data == [("fs-rot", 0)]  # one batch over max_bytes (KIP-74), then the limit
    second = fetch(client, sid, 2, {})
    assert next(k for k, p in answered(second).items() if values(p)) == ("fs-rot", 1)


def new_session(client: RawClient, topic: str, partitions: int) -> int:
    return int(fetch(client, 0, 0, {topic: [(p, 0) for p in range(partitions)]}).session_id)


def test_full_cache_answers_without_a_session_and_evicts() -> None:
    """Two slots: a third session is refused (session id 0, a full answer, no error) while the
    cached ones are young; an idle session past the eviction time makes room; a session older
    than that (but in use) gives way to one with more partitions, never to a smaller one; a
    follower's session evicts a young consumer session."""
    config = {"max.incremental.fetch.session.cache.slots": 2,
              "min.incremental.fetch.session.eviction.ms": 1500}
    with EmbeddedBroker(config=config) as b:
        client = RawClient(b.bootstrap, timeout=30)
        create(client, "fs-full", partitions=4)
        a = new_session(client, "fs-full", 1)
        c = new_session(client, "fs-full", 2)
        assert a > 0 and c > 0
        refused = fetch(client, 0, 0, {"fs-full": [(p, 0) for p in range(4)]})
        assert (refused.error_code, refused.session_id) == (0, 0)
        assert len(answered(refused)) == 4
        # Keep `a` in use past the eviction time; `c` idles and goes stale.
        epoch_a = 1
        deadline = time.monotonic() + 1.8
        while time.monotonic() < deadline:
            assert fetch(client, a, epoch_a, {}).error_code == 0
            epoch_a += 1
            time.sleep(0.2)
        d = new_session(client, "fs-full", 3)  # evicts the stale `c`
        assert d > 0 and fetch(client, c, 1, {}).error_code == NOT_FOUND
        # `a` (1 partition) is old but in use: a smaller session cannot evict it, a larger can.
        assert fetch(client, a, epoch_a, {}).error_code == 0
        epoch_a += 1
        assert fetch(client, 0, 0, {"fs-full": [(0, 0)]}).session_id == 0
        e = new_session(client, "fs-full", 2)
        assert e > 0 and fetch(client, a, epoch_a, {}).error_code == NOT_FOUND
        # Both cached sessions (d, e) are young: only a follower's session may evict one.
        assert new_session(client, "fs-full", 4) == 0
        follower = fetch(client, 0, 0, {"fs-full": [(0, 0)]}, replica_id=1)
        assert follower.session_id > 0
        alive = [fetch(client, s, 1, {}).error_code for s in (d, e)]
        assert sorted(alive) == [0, NOT_FOUND]  # the smaller one (e, 2 partitions) went
        assert alive[1] == NOT_FOUND
        client.close()


def test_zero_slots_never_creates_sessions() -> None:
    with EmbeddedBroker(config={"max.incremental.fetch.session.cache.slots": 0}) as b:
        client = RawClient(b.bootstrap, timeout=30)
        create(client, "fs-none")
        resp = fetch(client, 0, 0, {"fs-none": [(0, 0)]})
        assert (resp.error_code, resp.session_id, len(answered(resp))) == (0, 0, 1)
        client.close()


# --- real clients, through a wire tap -------------------------------------------------------


@pytest.fixture(scope="module")
def tapped() -> Iterator[tuple[EmbeddedBroker, WireTap]]:
    """A broker whose clients all go through one :class:`WireTap`."""
    tap = WireTap()
    config = {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{tap.port}"}
    try:
        with EmbeddedBroker(config=config) as b:
            tap.upstream = (b.host, b.port)
            yield b, tap
    finally:
        tap.close()


def session_of(exchange: Exchange) -> tuple[int, int, int, int]:
    """(request session id, request epoch, response error, response session id) of a Fetch."""
    request = exchange.request
    client_id_len = struct.unpack_from(">h", request, 8)[0]
    flexible = exchange.api_version >= 12
    body = memoryview(request)[10 + max(client_id_len, 0) + (1 if flexible else 0):]
    req = fast.decode_fetch_request(body, exchange.api_version)
    head = 4 + (1 if flexible else 0) + 4  # correlation id, header tags, throttle_time_ms
    error, session_id = struct.unpack_from(">hi", exchange.response, head)
    return req.session_id, req.session_epoch, error, session_id


def test_kafka_python_idle_consumer_of_100_partitions(
        tapped: tuple[EmbeddedBroker, WireTap]) -> None:
    """kafka-python opens a session; records produced meanwhile all arrive exactly once through
    incremental fetches, and an idle consumer's requests and responses stay a few dozen bytes
    (the full ones carry all 100 partitions)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    broker, tap = tapped
    client = RawClient(broker.bootstrap)
    create(client, "fs-kp", partitions=100)
    start = len(tap.of(ApiKey.FETCH))
    consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{tap.port}", fetch_max_wait_ms=100,
                             enable_auto_commit=False)
    try:
        consumer.assign([KTP("fs-kp", p) for p in range(100)])
        consumer.seek_to_beginning()
        got: list[bytes] = []

        def poll_for(seconds: float) -> None:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=100).values():
                    got.extend(r.value for r in records)

        poll_for(1.5)  # the session is open and idle
        sent = [f"{p}-{i}".encode() for p in range(0, 100, 7) for i in range(3)]
        for p in range(0, 100, 7):
            produce(client, "fs-kp", batch([f"{p}-{i}".encode() for i in range(3)]),
                    partition=p)
        deadline = time.monotonic() + 20
        while len(got) < len(sent) and time.monotonic() < deadline:
            poll_for(0.2)
        assert sorted(got) == sorted(sent)
        mark = len(tap.of(ApiKey.FETCH)) - start
        poll_for(1.5)  # idle again
    finally:
        consumer.close()
        client.close()
    fetches = tap.of(ApiKey.FETCH)[start:]
    sessions = [session_of(e) for e in fetches]
    full = [e for e, s in zip(fetches, sessions, strict=True) if s[1] == 0 and s[3] > 0]
    assert full, sessions[:5]
    assert all(s[2] == 0 for s in sessions)
    idle = [e for e, s in zip(fetches[mark:], sessions[mark:], strict=True) if s[1] > 0]
    assert len(idle) >= 5
    request_sizes = sorted(e.request_size for e in idle)
    response_sizes = sorted(e.response_size for e in idle)
    print(f"kafka-python, 100 partitions: full request {full[0].request_size} B / response "
          f"{full[0].response_size} B; idle incremental request {request_sizes[0]}-"
          f"{request_sizes[-1]} B / response {response_sizes[0]}-{response_sizes[-1]} B "
          f"({len(idle)} fetches)")
    assert full[0].request_size > 1500 and full[0].response_size > 2500
    assert request_sizes[-1] < 100 and response_sizes[-1] < 40


def consume_sessionless(tap: WireTap, consume: Any) -> None:
    """Run ``consume`` (returns the values it read) and check every Fetch it sent was
    sessionless (id 0, epoch -1) and answered without a session or error."""
    start = len(tap.of(ApiKey.FETCH))
    assert sorted(consume()) == [b"v0", b"v1", b"v2"]
    sessions = {session_of(e) for e in tap.of(ApiKey.FETCH)[start:]}
    assert sessions == {(0, -1, 0, 0)}


def test_confluent_kafka_fetches_without_a_session(
        tapped: tuple[EmbeddedBroker, WireTap]) -> None:
    """librdkafka 2.x does not implement KIP-227: it always sends session id 0, epoch -1."""
    from confluent_kafka import Consumer, TopicPartition

    broker, tap = tapped
    client = RawClient(broker.bootstrap)
    create(client, "fs-ck", partitions=2)
    produce(client, "fs-ck", batch([b"v0", b"v1", b"v2"]), partition=1)
    client.close()

    def consume() -> list[bytes]:
        consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{tap.port}", "group.id": "fs-ck",
                             "fetch.wait.max.ms": 50, "enable.auto.commit": False})
        consumer.assign([TopicPartition("fs-ck", p, 0) for p in range(2)])
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < 3 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        for _ in range(5):  # a few idle fetches too
            consumer.poll(0.1)
        consumer.close()
        return got

    consume_sessionless(tap, consume)


def test_aiokafka_fetches_without_a_session(tapped: tuple[EmbeddedBroker, WireTap]) -> None:
    """aiokafka 0.14 sends sessionless fetches (id 0, epoch -1)."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition

    broker, tap = tapped
    client = RawClient(broker.bootstrap)
    create(client, "fs-aio", partitions=2)
    produce(client, "fs-aio", batch([b"v0", b"v1", b"v2"]), partition=0)
    client.close()

    async def consume() -> list[bytes]:
        consumer = AIOKafkaConsumer(bootstrap_servers=f"127.0.0.1:{tap.port}",
                                    fetch_max_wait_ms=50, enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([TopicPartition("fs-aio", p) for p in range(2)])
            await consumer.seek_to_beginning()
            got: list[bytes] = []
            deadline = time.monotonic() + 20
            while len(got) < 3 and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    got.extend(r.value for r in records)
            await consumer.getmany(timeout_ms=300)
            return got
        finally:
            await consumer.stop()

    consume_sessionless(tap, lambda: asyncio.run(consume()))


def test_epochs_wrap_to_one_and_stay_final() -> None:
    assert [next_epoch(e) for e in (0, 1, 2**31 - 1, -1)] == [1, 2, 1, -1]


def test_strom_client_consumer_uses_the_session(tapped: tuple[EmbeddedBroker, WireTap]) -> None:
    """strom's own Consumer opens a session on its leader: records produced while it idles
    arrive exactly once through incremental fetches, and idle fetches stay small."""
    import asyncio

    from strom.client.consumer import Consumer
    from strom.common.types import TopicPartition as TP

    broker, tap = tapped
    client = RawClient(broker.bootstrap)
    create(client, "fs-strom", partitions=100)
    start = len(tap.of(ApiKey.FETCH))
    sent = [f"{p}".encode() for p in range(0, 100, 9)]

    async def consume() -> list[bytes]:
        consumer = Consumer(f"127.0.0.1:{tap.port}", max_wait_ms=100)
        await consumer.start()
        try:
            consumer.assign([TP("fs-strom", p) for p in range(100)])
            await consumer.seek_to_beginning()
            got: list[bytes] = []
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:
                got += [r.value for r in await consumer.poll(0.1)]
            for p in range(0, 100, 9):
                await asyncio.to_thread(produce, client, "fs-strom", batch([f"{p}".encode()]),
                                        partition=p)
            deadline = time.monotonic() + 20
            while len(got) < len(sent) and time.monotonic() < deadline:
                got += [r.value for r in await consumer.poll(0.1)]
            return got
        finally:
            await consumer.close()

    try:
        assert sorted(asyncio.run(consume())) == sorted(sent)
    finally:
        client.close()
    fetches = tap.of(ApiKey.FETCH)[start:]
    sessions = [session_of(e) for e in fetches]
    assert all(s[2] == 0 for s in sessions)
    assert sessions[0][1] == 0 and sessions[0][3] > 0  # full request, session granted
    incremental = [e for e, s in zip(fetches, sessions, strict=True) if s[1] > 0]
    assert len(incremental) >= 5
    assert min(e.request_size for e in incremental) < 100
    assert min(e.response_size for e in incremental) < 40
