"""A 3-broker strom cluster (real ZooKeeper, broker subprocesses): replicated produce
throughput against unreplicated, failover time after kill -9 of a leader, consume throughput.

    python bench/cluster_bench.py [--records 1000000] [--repeats 3] [--failovers 3]
                                  [--rows produce,latency,failover,consume] [--out FILE]
                                  [--also-source DIR]

Produce rows (confluent-kafka, 100-byte records, 8 partitions, ``linger.ms=5``: the client
settings of ``broker_bench.py``'s produce row), each against a fresh topic, interleaved per
repeat so a noisy shared machine hits them alike, medians of ``--repeats``:

* RF=1 acks=1 — the baseline every ratio is taken to;
* RF=3 acks=1 — the leader answers after its own append, followers copy in the background;
* RF=3 acks=all, ``min.insync.replicas=2`` — answered once every ISR member has the records.

Broker CPU is summed over the three broker processes (utime + stime from ``/proc``), per
million records. Latency: one record at a time (``linger.ms=0``) to partition 0 of each kind
of topic, p50 / p99 of the acknowledgement. Failover: an idempotent acks=all producer writes
``--failover-rate`` records/s round-robin over 8 partitions of an RF=3 topic while the leader
of partition 0 is killed with SIGKILL; reported are the seconds from the kill until the first
record sent after the kill to a partition that broker led is acknowledged, and until every
partition has acknowledged one (the victim is restarted and the ISR full again before the next
repeat).
ZooKeeper runs with ``tickTime=200``; the brokers' session timeout is
``zookeeper.session.timeout.ms`` (2000 unless ``--session-ms``).

Consume rows read the RF=3 acks=1 topic from the beginning (``fetch.queue.backoff.ms=10``, as
``broker_bench.py``'s first consume row): from the leaders, and — when the brokers know
``replica.selector.class`` (KIP-392) — with ``client.rack`` naming broker 0's rack, so the
partitions led by brokers 1 and 2 are read from their follower on broker 0.

``--also-source DIR`` (repeatable) runs only the produce rows, on a fresh cluster per source
tree and round (this tree's first, then each DIR's, per repeat): a paired before / after.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker_bench import CONSUMERS, PARTITIONS, VALUE, consume, produce  # type: ignore[import-not-found]
from brokers import CLK_TCK  # type: ignore[import-not-found]
from strom.common.config import BROKER_KEYS
from strom.testing.chaos.zkview import ZooKeeperView
from strom.testing.cluster import SESSION_TIMEOUT_MS, EmbeddedCluster

BROKERS = 3
RACKS = [f"rack-{n}" for n in range(BROKERS)]
#: Kafka's rack-aware selector (KIP-392); a broker that knows the key gets it.
RACK_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
MB = 1e6


def cpu_seconds(cluster: EmbeddedCluster) -> float:
    """utime + stime of every running broker process."""
    total = 0.0
    for broker in cluster.brokers.values():
        if broker.pid is None:
            continue
        try:
            stat = Path(f"/proc/{broker.pid}/stat").read_text()
        except FileNotFoundError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


def create_topic(bootstrap: str, name: str, rf: int, configs: dict[str, str] | None = None,
                 view: ZooKeeperView | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, PARTITIONS, rf, config=configs or {})
    for f in admin.create_topics([topic]).values():
        f.result(30)
    if view is not None:
        wait_full_isr(view, name, rf)
    time.sleep(1.0)  # every broker's metadata cache has it


def wait_full_isr(view: ZooKeeperView, topic: str, rf: int, timeout: float = 120.0) -> None:
    def full() -> bool:
        for p in range(PARTITIONS):
            state = view.partition_state(topic, p)
            isr = state.get("isr") if state else None
            if not isinstance(isr, list) or len(isr) != rf or state.get("leader", -1) == -1:
                return False
        return True
    view.wait_for(f"{topic}: every partition's ISR at {rf}", full, timeout)


@dataclass
class Row:
    name: str
    rf: int
    acks: str
    configs: dict[str, str] = field(default_factory=dict)
    rates: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


def produce_rows() -> list[Row]:
    return [Row("RF=1 acks=1", 1, "1"), Row("RF=3 acks=1", 3, "1"),
            Row("RF=3 acks=all (min ISR 2)", 3, "all", {"min.insync.replicas": "2"})]


def produce_round(cluster: EmbeddedCluster, view: ZooKeeperView, rows: list[Row],
                  records: int, repeat: int) -> str:
    """Runs every produce row once, each on a fresh topic; returns the RF=3 acks=1 topic
    (for the consume rows)."""
    target = SimpleNamespace(bootstrap=cluster.bootstrap)
    rf3_topic = ""
    for i, row in enumerate(rows):
        topic = f"p{i}-r{repeat}"
        create_topic(cluster.bootstrap, topic, row.rf, row.configs, view)
        cpu0, t0 = cpu_seconds(cluster), time.perf_counter()
        produce(target, topic, records, row.acks)
        elapsed = time.perf_counter() - t0
        row.rates.append(records / elapsed)
        row.cpu.append((cpu_seconds(cluster) - cpu0) / records * 1e6)
        print(f"  {row.name} #{repeat}: {records / elapsed:,.0f} rec/s, "
              f"{row.cpu[-1]:.1f} CPU s/M", file=sys.stderr, flush=True)
        if row.rf == 3 and row.acks == "1":
            rf3_topic = topic
    return rf3_topic


def produce_table(rows: list[Row], out: list[str]) -> None:
    base = statistics.median(rows[0].rates)
    out += ["| produce | records/s | MB/s | ratio to RF=1 | broker CPU s / M records "
            "(3 brokers) | runs (records/s) |", "|---|---|---|---|---|---|"]
    for row in rows:
        rate = statistics.median(row.rates)
        runs = ", ".join(f"{r:,.0f}" for r in row.rates)
        out.append(f"| {row.name} | {rate:,.0f} | {rate * len(VALUE) / MB:.2f} | "
                   f"{rate / base:.2f} | {statistics.median(row.cpu):.1f} | {runs} |")


def paired_produce(sources: dict[str, str | None], configs: dict[str, object], records: int,
                   repeats: int, out: list[str]) -> None:
    """``--also-source``: the produce rows on a cluster per source tree, one round each in
    turn per repeat (a before / after pair on the same machine state)."""
    rows = {name: produce_rows() for name in sources}
    for repeat in range(repeats):
        for name, source in sources.items():
            with source_tree(source), EmbeddedCluster(BROKERS, configs=configs,
                                                      racks=RACKS) as cluster:
                view = ZooKeeperView(cluster.zookeeper_connect)
                try:
                    print(f" {name}:", file=sys.stderr)
                    produce_round(cluster, view, rows[name], records, repeat)
                finally:
                    view.close()
    for name in sources:
        out += ["", f"{name}:", ""]
        produce_table(rows[name], out)
    first, *others = sources
    for other in others:
        out += ["", f"{first} / {other} (records/s; CPU per record):", ""]
        for a, b in zip(rows[first], rows[other], strict=True):
            out.append(f"- {a.name}: {statistics.median(a.rates) / statistics.median(b.rates):.2f}x"
                       f" records/s, {statistics.median(a.cpu) / statistics.median(b.cpu):.2f}x"
                       " CPU")


@contextlib.contextmanager
def source_tree(source: str | None) -> Iterator[None]:
    """Brokers started inside run strom from ``source`` (None: this process's strom)."""
    saved = os.environ.get("PYTHONPATH")
    if source is not None:
        os.environ["PYTHONPATH"] = os.path.abspath(source)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def bench_latency(cluster: EmbeddedCluster, view: ZooKeeperView, sends: int,
                  out: list[str]) -> None:
    """One record at a time (``linger.ms=0``, flush after each) to partition 0: the
    acknowledgement's round trip, replication included for acks=all."""
    rows = produce_rows()
    results: list[tuple[str, float, float]] = []
    for i, row in enumerate(rows):
        topic = f"lat{i}"
        create_topic(cluster.bootstrap, topic, row.rf, row.configs, view)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": row.acks,
                             "linger.ms": 0})
        samples = []
        for n in range(sends + 50):
            t0 = time.perf_counter()
            producer.produce(topic, VALUE, partition=0)
            producer.flush(30)
            if n >= 50:  # the first sends connect and fetch metadata
                samples.append((time.perf_counter() - t0) * 1000)
        samples.sort()
        results.append((row.name, statistics.median(samples),
                        samples[int(len(samples) * 0.99) - 1]))
    out += ["", f"Produce latency ({sends} sends of one record, linger.ms=0, each flushed "
            "before the next):", "", "| produce | p50 ms | p99 ms |", "|---|---|---|"]
    out += [f"| {name} | {p50:.2f} | {p99:.2f} |" for name, p50, p99 in results]


@dataclass
class FailoverRun:
    victim: int
    led: list[int]
    first_s: float  # first record sent after the kill to a partition the victim led, acked
    all_s: float    # every partition has acked a record sent after the kill
    errors: int


class SteadyProducer:
    """An idempotent acks=all producer sending ``rate`` records/s round-robin over
    ``partitions`` partitions on its own thread; remembers, per partition, when the first
    record sent after :meth:`mark` was acknowledged."""

    def __init__(self, bootstrap: str, topic: str, rate: int, partitions: int = PARTITIONS,
                 message_timeout_ms: int = 60000) -> None:
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                   "enable.idempotence": True, "linger.ms": 5,
                                   "message.timeout.ms": message_timeout_ms, "log_level": 2})
        self._topic, self._rate, self._partitions = topic, rate, partitions
        self._mark = float("inf")
        self.acked_after: dict[int, float] = {}
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def mark(self, at: float) -> None:
        self.acked_after = {}
        self._mark = at

    def _report(self, partition: int, sent: float) -> Callable[[object, object], None]:
        def report(err: object, _msg: object) -> None:
            if err is not None:
                self.errors += 1
            elif sent >= self._mark and partition not in self.acked_after:
                self.acked_after[partition] = time.monotonic()
        return report

    def _run(self) -> None:
        start, i = time.monotonic(), 0
        while not self._stop.is_set():
            now = time.monotonic()
            due = start + i / self._rate
            if due > now:
                self._producer.poll(due - now)
                continue
            partition = i % self._partitions
            self._producer.produce(self._topic, VALUE, partition=partition,
                                   on_delivery=self._report(partition, now))
            self._producer.poll(0)
            i += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._producer.flush(60)


def bench_failover(cluster: EmbeddedCluster, view: ZooKeeperView, repeats: int, rate: int,
                   session_ms: int, out: list[str]) -> None:
    topic = "failover"
    create_topic(cluster.bootstrap, topic, 3, {"min.insync.replicas": "2"}, view)
    producer = SteadyProducer(cluster.bootstrap, topic, rate)
    runs: list[FailoverRun] = []
    try:
        time.sleep(3.0)
        for _ in range(repeats):
            state = view.partition_state(topic, 0) or {}
            victim = int(str(state["leader"]))
            led = [p for p in range(PARTITIONS)
                   if (view.partition_state(topic, p) or {}).get("leader") == victim]
            errors0 = producer.errors
            killed = time.monotonic()
            producer.mark(killed)
            cluster.brokers[victim].kill()
            deadline = killed + 120
            while len(producer.acked_after) < PARTITIONS and time.monotonic() < deadline:
                time.sleep(0.02)
            acked = dict(producer.acked_after)
            first = min((acked[p] for p in led if p in acked), default=float("nan"))
            last = max(acked.values()) if len(acked) == PARTITIONS else float("nan")
            runs.append(FailoverRun(victim, led, first - killed, last - killed,
                                    producer.errors - errors0))
            print(f"  failover: killed {victim} (led {led}): first {first - killed:.2f} s, "
                  f"all {last - killed:.2f} s", file=sys.stderr, flush=True)
            cluster.brokers[victim].start()
            cluster.wait_for_brokers(BROKERS, 60)
            wait_full_isr(view, topic, 3)
            time.sleep(2.0)
    finally:
        producer.close()
    out += ["", f"Failover (kill -9 of partition 0's leader, idempotent acks=all producer at "
            f"{rate} records/s over {PARTITIONS} partitions, ZooKeeper tickTime=200, "
            f"session {session_ms} ms):", "",
            "| failover | median s | runs (s) |", "|---|---|---|"]
    for label, values in (
            ("kill → first ack on a partition the victim led",
             [r.first_s for r in runs]),
            ("kill → every partition acknowledged again", [r.all_s for r in runs])):
        out.append(f"| {label} | {statistics.median(values):.2f} | "
                   + ", ".join(f"{v:.2f}" for v in values) + " |")
    out.append(f"| failed sends | {sum(r.errors for r in runs)} | |")


def bench_consume(cluster: EmbeddedCluster, topic: str, records: int, repeats: int,
                  out: list[str]) -> None:
    target = SimpleNamespace(bootstrap=cluster.bootstrap)
    config = CONSUMERS["consume rec/s"]
    cases: list[tuple[str, dict[str, object]]] = [("from the leaders", dict(config))]
    if "replica.selector.class" in BROKER_KEYS:
        cases.append((f"client.rack={RACKS[0]} (followers on broker 0, KIP-392)",
                      {**config, "client.rack": RACKS[0]}))
    out += ["", f"Consume ({records:,} records of the RF=3 acks=1 topic, "
            "fetch.queue.backoff.ms=10):", "",
            "| consume | records/s | MB/s | broker CPU s / M records | runs |",
            "|---|---|---|---|---|"]
    for label, consumer_config in cases:
        rates, cpus = [], []
        for _ in range(repeats):
            cpu0, t0 = cpu_seconds(cluster), time.perf_counter()
            count = consume(target, topic, records, **consumer_config)
            elapsed = time.perf_counter() - t0
            rates.append(count / elapsed)
            cpus.append((cpu_seconds(cluster) - cpu0) / count * 1e6)
        rate = statistics.median(rates)
        out.append(f"| {label} | {rate:,.0f} | {rate * len(VALUE) / MB:.2f} | "
                   f"{statistics.median(cpus):.1f} | "
                   + ", ".join(f"{r:,.0f}" for r in rates) + " |")
    if len(cases) == 1:
        out.append("| (follower fetching: the brokers do not know replica.selector.class "
                   "yet, KIP-392 not on this build) | | | | |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--failovers", type=int, default=3)
    parser.add_argument("--failover-rate", type=int, default=1000)
    parser.add_argument("--session-ms", type=int, default=SESSION_TIMEOUT_MS)
    parser.add_argument("--rows", default="produce,latency,failover,consume")
    parser.add_argument("--latency-sends", type=int, default=1000)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting for every broker")
    parser.add_argument("--also-source", metavar="DIR", action="append", default=[],
                        help="produce rows only: also run brokers from this source tree "
                             "(e.g. /path/to/main/src), rounds interleaved")
    parser.add_argument("--out")
    args = parser.parse_args()
    rows = set(args.rows.split(","))
    configs: dict[str, object] = {"zookeeper.session.timeout.ms": args.session_ms}
    configs.update(kv.split("=", 1) for kv in args.set)
    if "replica.selector.class" in BROKER_KEYS:
        configs["replica.selector.class"] = RACK_SELECTOR
    out: list[str] = [f"3 brokers + ZooKeeper (tickTime=200, session {args.session_ms} ms), "
                      f"{args.records:,} records of {len(VALUE)} bytes, {PARTITIONS} "
                      f"partitions, median of {args.repeats}:", ""]
    if args.also_source:
        sources: dict[str, str | None] = {"this tree": None}
        sources.update((f"@{s}", s) for s in args.also_source)
        paired_produce(sources, configs, args.records, args.repeats, out)
    else:
        run_cluster(rows, configs, args, out)
    text = "\n".join(out)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


def run_cluster(rows: set[str], configs: dict[str, object], args: argparse.Namespace,
                out: list[str]) -> None:
    with EmbeddedCluster(BROKERS, configs=configs, racks=RACKS) as cluster:
        view = ZooKeeperView(cluster.zookeeper_connect)
        try:
            topic = ""
            if "produce" in rows or "consume" in rows:
                stats = produce_rows()
                for repeat in range(args.repeats if "produce" in rows else 1):
                    topic = produce_round(cluster, view, stats, args.records, repeat)
                if "produce" in rows:
                    produce_table(stats, out)
            if "latency" in rows:
                bench_latency(cluster, view, args.latency_sends, out)
            if "failover" in rows:
                bench_failover(cluster, view, args.failovers, args.failover_rate,
                               args.session_ms, out)
            if "consume" in rows:
                bench_consume(cluster, topic, args.records, args.repeats, out)
        finally:
            view.close()


if __name__ == "__main__":
    main()
