"""FetchPacer against simulated clients (deterministic, simulated time).

The prefetching client models librdkafka's fetcher (rd_kafka_toppar_fetch_decide, 2.x): after
each parsed response it checks every partition against the length and value bytes of the
consumer queue all partitions forward to (``queued.min.messages``, ``queued.max.messages.kbytes``
x 1000), so all partitions back off together for ``backoff`` seconds
(``fetch.queue.backoff.ms``), and again while the queue is still over its limit; it
re-fetches as soon as a response is parsed otherwise. The application drains the queue at
``drain`` records/s. The on-demand client models kafka-python / the Java client: it fetches
again only once the application has processed the previous response.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from strom.broker.fetch_pacing import (
    STALL_GAP,
    FetchPacer,
    Window,
    drain_for_limit,
    fit_limit,
    queue_at_end,
)
from strom.testing import EmbeddedBroker

RECORD = 107  # bytes per 100-byte record inside a v2 batch
FULL = 8 * 1024 * 1024  # 8 partitions x max.partition.fetch.bytes
#: queued.max.messages.kbytes (65536, x 1000 bytes of record values) in 100-byte records: the
#: limit that ends the queue of a client with queued.min.messages=1000000.
LIMIT_64MIB = 65_536 * 1000 // 100
_PERIOD = 0.05  # seconds per drawn drain rate (jitter)


@dataclass
class Outcome:
    records_per_s: float
    stalls: int
    responses: int
    pacer: FetchPacer | None


def prefetching(total: int, drain: float, pacer: FetchPacer | None, *, queue_min: int = 100_000,
                backoff: float = 1.0, parse: float = 3e6, serve: float = 0.005,
                jitter: float = 0.0, hiccup_every: float = 0.0, hiccup: float = 0.3) -> Outcome:
    """Consume ``total`` records with a librdkafka-like client; returns simulated throughput.

    With ``jitter`` the application's drain rate is ``drain x (1 ± jitter)``, drawn (seeded)
    per 50 ms. With ``hiccup_every`` the whole client process stops for ``hiccup`` seconds
    that often (descheduled on a loaded machine): no fetch, no draining."""
    t = queued = 0.0
    next_hiccup = hiccup_every if hiccup_every else float("inf")
    delivered = stalls = responses = 0
    rng = random.Random(1)
    factors: dict[int, float] = {}

    def rate_in(slot: int) -> float:
        if slot not in factors:
            factors[slot] = 1 + jitter * (2 * rng.random() - 1)
        return drain * factors[slot]

    def run_app(until: float) -> None:
        nonlocal queued, t
        while t < until:
            slot = int(t / _PERIOD)
            end = (slot + 1) * _PERIOD
            if end <= t:  # rounding at a slot's boundary
                slot += 1
                end = (slot + 1) * _PERIOD
            end = min(end, until)
            queued = max(0.0, queued - rate_in(slot) * (end - t))
            t = end

    while delivered < total:
        if t >= next_hiccup:
            t += hiccup
            next_hiccup += hiccup_every
        hold = pacer.before_read(t) if pacer else 0.0
        cap = pacer.budget(t + hold) if pacer else None
        budget = FULL if cap is None else min(FULL, cap)
        n = min(budget // RECORD, total - delivered)
        sent = t + hold + serve * n * RECORD / FULL
        if pacer:
            pacer.after_read(sent, n * RECORD, delivered + n < total)
        responses += 1
        run_app(sent + n / parse)
        queued += n
        delivered += n
        while queued >= queue_min and delivered < total:
            stalls += 1
            run_app(t + backoff)
    while queued > 0:
        run_app(t + queued / (drain * (1 + jitter)) + 1e-6)
    return Outcome(total / t, stalls, responses, pacer)


def on_demand(total: int, drain: float, pacer: FetchPacer, response_bytes: int = FULL) -> Outcome:
    t = 0.0
    delivered = responses = 0
    while delivered < total:
        t += pacer.before_read(t)
        budget = pacer.budget(t)
        n = min((response_bytes if budget is None else min(budget, response_bytes)) // RECORD,
                total - delivered)
        pacer.after_read(t, n * RECORD, delivered + n < total)
        responses += 1
        delivered += n
        t += 0.001 + n / drain  # the application uses the records, then fetches again
    return Outcome(total / t, 0, responses, pacer)


@pytest.mark.parametrize("drain", [300_000.0, 1_000_000.0, 1_500_000.0])
def test_pacing_keeps_a_prefetching_client_out_of_its_queue_backoff(drain: float) -> None:
    unpaced = prefetching(5_000_000, drain, None)
    paced = prefetching(5_000_000, drain, FetchPacer())
    # Unpaced, the client idles in 1 s back-offs most of the time.
    assert unpaced.records_per_s < 0.6 * drain
    assert paced.pacer is not None and paced.pacer.paced
    assert paced.stalls <= 4, paced
    assert paced.records_per_s > 1.4 * unpaced.records_per_s, (paced, unpaced)


def test_pacing_converges_on_long_runs() -> None:
    paced = prefetching(20_000_000, 1_000_000.0, FetchPacer())
    assert paced.stalls <= 4
    assert paced.records_per_s > 0.75 * 1_000_000


def test_a_client_whose_queue_never_overflows_is_never_paced() -> None:
    """fetch.queue.backoff.ms=10: the client's pauses are shorter than a stall."""
    pacer = FetchPacer()
    fast = prefetching(5_000_000, 1_000_000.0, pacer, backoff=0.01)
    assert not pacer.paced and pacer.stalls == 0
    assert fast.records_per_s == pytest.approx(
        prefetching(5_000_000, 1_000_000.0, None, backoff=0.01).records_per_s)


def test_a_large_client_queue_is_learned() -> None:
    """queued.min.messages=1M: the 64 MiB byte limit ends the first burst; pacing learns it."""
    unpaced = prefetching(5_000_000, 1_000_000.0, None, queue_min=620_000)
    paced = prefetching(5_000_000, 1_000_000.0, FetchPacer(), queue_min=620_000)
    assert paced.records_per_s >= unpaced.records_per_s
    assert paced.pacer is not None
    assert paced.pacer.queue_bytes >= 620_000 * RECORD * 0.9


@pytest.mark.parametrize("jitter", [0.0, 0.3])
@pytest.mark.parametrize("drain", [1_000_000.0, 1_300_000.0, 1_500_000.0])
def test_a_64_mib_queue_client_pays_one_stall_on_short_runs(drain: float, jitter: float) -> None:
    """queued.min.messages=1M, 2M records: the first stall is the only one (nothing is known
    before it), and pacing never does worse than not pacing."""
    unpaced = prefetching(2_000_000, drain, None, queue_min=LIMIT_64MIB, jitter=jitter)
    paced = prefetching(2_000_000, drain, FetchPacer(), queue_min=LIMIT_64MIB, jitter=jitter)
    assert paced.stalls == 1, paced
    assert paced.records_per_s >= 0.99 * unpaced.records_per_s, (paced, unpaced)


@pytest.mark.parametrize("jitter", [0.0, 0.3])
@pytest.mark.parametrize("drain", [1_000_000.0, 1_300_000.0, 1_500_000.0])
def test_a_64_mib_queue_client_converges_within_two_more_stalls(
    drain: float, jitter: float,
) -> None:
    """queued.min.messages=1M, 10M records, drain steady or varying ±30 % every 50 ms: after
    the first stall the ramp's overshoot costs at most two more, then the fitted limit and
    drain rate hold (the ramp alone used to stall up to 7 times at 0.65-0.85 of the drain)."""
    paced = prefetching(10_000_000, drain, FetchPacer(), queue_min=LIMIT_64MIB, jitter=jitter)
    assert paced.stalls <= 3, paced
    assert paced.records_per_s >= 0.78 * drain, paced


@pytest.mark.parametrize("jitter", [0.0, 0.3])
@pytest.mark.parametrize("drain", [1_000_000.0, 1_300_000.0, 1_500_000.0])
def test_a_default_queue_client_is_paced_near_its_drain_rate(drain: float, jitter: float) -> None:
    short = prefetching(2_000_000, drain, FetchPacer(), jitter=jitter)
    long = prefetching(10_000_000, drain, FetchPacer(), jitter=jitter)
    assert short.stalls <= 2 and long.stalls <= 3, (short, long)
    assert short.records_per_s >= 0.45 * drain, short
    assert long.records_per_s >= 0.65 * drain, long


@pytest.mark.parametrize("drain", [600_000.0, 1_000_000.0])
def test_client_hiccups_are_not_taken_for_queue_stalls(drain: float) -> None:
    """A loaded machine: the client stops for 0.3 s every 2 s. Such a silence, shorter than
    the client's back-off seen at its first real stall, used to count as a stall and fit a
    queue limit of 10-15 MB (64 MB real): paced at 0.2-0.3 M records/s, it did worse than
    not pacing at all (0.43-0.47 of the drain rate against 0.66-0.86)."""
    kwargs = {"queue_min": LIMIT_64MIB, "hiccup_every": 2.0}
    unpaced = prefetching(10_000_000, drain, None, **kwargs)  # type: ignore[arg-type]
    pacer = FetchPacer()
    paced = prefetching(10_000_000, drain, pacer, **kwargs)  # type: ignore[arg-type]
    assert pacer.stalls == paced.stalls, paced  # every stall the pacer counted was real
    assert paced.records_per_s >= 0.98 * unpaced.records_per_s, (paced, unpaced)
    assert pacer.queue_bytes >= 0.5 * LIMIT_64MIB * RECORD


def test_a_client_whose_queue_outlasts_its_back_off_is_served_unpaced() -> None:
    """A slow application (0.4 M records/s) with a 64 MB queue: the queue still holds data
    when the 1 s back-off ends, so stalls cost it nothing and pacing could only slow it."""
    pacer = FetchPacer()
    paced = prefetching(10_000_000, 400_000.0, pacer, queue_min=LIMIT_64MIB)
    assert pacer.stalls >= 2 and not pacer.paced
    assert paced.records_per_s >= 0.99 * 400_000


def test_two_stalls_give_the_queue_limit_and_drain_rate() -> None:
    """The fit of two windows of different shapes finds the client's settings."""
    drain = 1_300_000.0
    pacer = FetchPacer()
    prefetching(10_000_000, drain, pacer, queue_min=LIMIT_64MIB)
    assert pacer.stalls >= 2
    assert pacer.queue_bytes == pytest.approx(LIMIT_64MIB * RECORD, rel=0.15)
    assert pacer.rate is not None
    assert 0.85 * drain * RECORD <= pacer.rate <= 1.1 * drain * RECORD


def test_the_queue_model_accounts_for_an_application_waiting_for_data() -> None:
    window = Window(0.0)
    for i in range(10):  # 1 MB every 100 ms: 10 MB/s
        window.add(i * 0.1, 1e6)
    # Draining 5 MB/s, the queue never empties: 10 MB sent less 0.9 s of draining.
    assert queue_at_end(window, 5e6) == (pytest.approx(10e6 - 4.5e6), pytest.approx(0.9))
    # Draining 20 MB/s, each response is gone before the next: only the last one is queued.
    assert queue_at_end(window, 20e6) == (pytest.approx(1e6), pytest.approx(0.0))


def test_fit_limit_recovers_a_limit_and_drain_rate_and_refuses_similar_windows() -> None:
    limit, drain = 40e6, 100e6

    def window_until_full(rate: float, chunk: float) -> Window:
        window, t = Window(0.0), 0.0
        while True:
            window.add(t, chunk)
            if queue_at_end(window, drain)[0] >= limit:
                return window
            t += chunk / rate

    fast = window_until_full(300e6, 2e6)
    slow = window_until_full(130e6, 2e6)
    fit = fit_limit(fast, slow)
    assert fit is not None
    assert fit[0] == pytest.approx(limit, rel=0.05) and fit[1] == pytest.approx(drain, rel=0.05)
    assert drain_for_limit(slow, fit[0]) == pytest.approx(drain, rel=0.05)
    assert fit_limit(fast, window_until_full(300e6, 2e6)) is None


@pytest.mark.parametrize("drain", [50_000.0, 300_000.0, 5_000_000.0])
def test_an_on_demand_client_is_never_paced(drain: float) -> None:
    pacer = FetchPacer()
    on_demand(3_000_000, drain, pacer)
    assert not pacer.paced


def test_a_caught_up_consumer_is_not_held() -> None:
    pacer = FetchPacer()
    prefetching(2_000_000, 1_000_000.0, pacer)
    assert pacer.paced
    t = 100.0
    for _ in range(50):  # tailing: a few records per response, re-fetched at once
        assert pacer.before_read(t) < 0.001
        pacer.after_read(t, 20 * RECORD, backlogged=False)
        t += 0.002


def test_a_gap_after_a_response_that_left_nothing_behind_is_no_stall() -> None:
    pacer = FetchPacer()
    pacer.before_read(0.0)
    pacer.after_read(0.0, FULL, backlogged=True)
    pacer.before_read(0.01)
    pacer.after_read(0.01, 1000, backlogged=False)
    assert pacer.before_read(0.01 + 10 * STALL_GAP) == 0.0
    assert not pacer.paced


# -- over a real socket ---------------------------------------------------------------------

PARTITIONS = 8


@pytest.fixture(scope="module")
def loaded_broker() -> Iterator[tuple[EmbeddedBroker, int]]:
    """A broker whose topic ``paced`` holds 400k 100-byte records over 8 partitions."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    with EmbeddedBroker(log_level="DEBUG") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic("paced", PARTITIONS, 1)]).values():
            future.result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                             "queue.buffering.max.messages": 1_000_000})
        total = 400_000
        for i in range(total):
            producer.produce("paced", i.to_bytes(4, "big") * 25, partition=i % PARTITIONS)
            if i % 50_000 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0
        yield broker, total


def _stall_lines(broker: EmbeddedBroker) -> list[str]:
    return [line for line in broker.output if "stalled on its own queue" in line]


def test_librdkafka_defaults_get_paced_and_every_record_once_in_order(
    loaded_broker: tuple[EmbeddedBroker, int],
) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    broker, total = loaded_broker
    before = len(_stall_lines(broker))
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "paced",
                         "enable.auto.commit": False, "client.id": "paced-rdkafka"})
    consumer.assign([TopicPartition("paced", p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    next_offset = [0] * PARTITIONS
    seen = 0
    deadline = time.monotonic() + 120
    try:
        while seen < total and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 1.0):
                assert msg.error() is None, msg.error()
                p = msg.partition()
                assert msg.offset() == next_offset[p]
                assert int.from_bytes(msg.value()[:4], "big") % PARTITIONS == p
                next_offset[p] += 1
                seen += 1
    finally:
        consumer.close()
    assert seen == total
    # The defaults overflow librdkafka's 100k-message queue; the broker saw it and paced.
    stalls = _stall_lines(broker)[before:]
    assert stalls and all("'paced-rdkafka'" in line for line in stalls), broker.output[-20:]


def test_kafka_python_on_demand_consumer_is_not_paced(
    loaded_broker: tuple[EmbeddedBroker, int],
) -> None:
    from kafka import KafkaConsumer, TopicPartition

    broker, _ = loaded_broker
    before = len(_stall_lines(broker))
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, client_id="paced-kafka-python",
                             enable_auto_commit=False, auto_offset_reset="earliest")
    parts = [TopicPartition("paced", p) for p in range(PARTITIONS)]
    consumer.assign(parts)
    seen = 0
    deadline = time.monotonic() + 120
    try:
        while seen < 100_000 and time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=1000, max_records=20_000)
            seen += sum(len(records) for records in batch.values())
            time.sleep(0.3)  # a slow application: the client fetches again only when drained
    finally:
        consumer.close()
    assert seen >= 100_000
    assert _stall_lines(broker)[before:] == []
