"""Topic creation under load: partitions created per second, and what a healthy producer on
an existing topic sees meanwhile.

    python bench/admin_bench.py [--targets strom,cluster,kafka,kafka-cluster] [--topics 1000]
                                [--modes serial,concurrent,batched] [--clients 16]
                                [--repeats 3] [--rate 200] [--probe-idempotent]
                                [--idle 8] [--after 8] [--rf 1] [--cluster-rf 3]
                                [--also-source DIR]
                                [--out FILE]

Targets: ``strom`` one broker (file-backed metadata), ``cluster`` a 3-broker
``EmbeddedCluster`` (real ZooKeeper), ``kafka`` one Apache Kafka 4.x KRaft node from
``$KAFKA_LIB`` (default /work/kafka-ref/lib; skipped when missing), ``kafka-cluster`` three
such nodes (a static quorum, every node broker and controller). Each run starts a fresh
target, creates the healthy topic (1 partition; on the cluster RF=3 with
``min.insync.replicas=2``) and starts the probe producer in a process of its own
(confluent-kafka, acks=all, ``linger.ms=0``, ``--rate`` records/s at fixed times, every
acknowledgement's latency recorded; ``--probe-idempotent``: an idempotent producer, up to 5
requests in flight instead of one). After ``--idle`` seconds of idle sampling it creates
``--topics`` one-partition topics (RF ``--rf``; ``--cluster-rf`` on the clusters):

* ``serial`` — one ``create_topics`` call per topic, all submitted at once from one client:
  a CreateTopics request per topic on one connection, which a broker (Kafka's and strom's)
  answers one after the other, so the rate is one over a request's latency;
* ``concurrent`` — the same spread over ``--clients`` admin clients (16), as many
  applications (or an application with many connections) creating topics at once;
* ``batched`` — ``create_topics`` calls of 100 topics each, all submitted at once from one
  client.

Before each run the bench waits until creating a directory and two files costs what it does
on a quiet filesystem (``settle_disk``): the previous target's deleted log directories
otherwise make the next target's creations up to twenty times dearer in kernel time.

Reported per run: partitions/s until the last CreateTopics answer, and until the broker's
Metadata (the bootstrap broker's) lists every new topic with a leader; the probe's p50 /
p99 / max latency idle and during the burst (records *sent* between the first request and
the last answer), their ratio, the longest time without any acknowledgement during the
burst, and the probe's p99 ``--after`` seconds once every new topic has a leader (the cost
of replicating the new partitions while they are idle). Medians over ``--repeats`` in the
summary table; ``--also-source DIR`` runs strom targets from another source tree too (a
before / after pair, runs interleaved).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import multiprocessing as mp
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from brokers import start_strom  # type: ignore[import-not-found]
from cluster_bench import source_tree  # type: ignore[import-not-found]
from kafka_ref import kafka_available, start_kafka, start_kafka_cluster  # type: ignore[import-not-found]

HEALTHY = "healthy"
BATCH = 100


# -- the probe producer (a process of its own) --------------------------------------------

def _probe(bootstrap: str, rate: int, idempotent: bool, conn: Any) -> None:
    """Send one record every 1/rate s until told to stop; send back (sent, acked) pairs."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "enable.idempotence": idempotent,
                         "message.timeout.ms": 300000, "log_level": 2})
    samples: list[tuple[float, float]] = []
    failed = [0]

    def report(sent: float) -> Any:
        def done(err: object, _msg: object) -> None:
            if err is None:
                samples.append((sent, time.monotonic()))
            else:
                failed[0] += 1
        return done

    start, i = time.monotonic(), 0
    while not conn.poll():
        now = time.monotonic()
        due = start + i / rate
        if due > now:
            producer.poll(due - now)
            continue
        producer.produce(HEALTHY, b"x" * 100, partition=0, on_delivery=report(now))
        producer.poll(0)
        i += 1
    producer.flush(300)
    conn.send({"samples": samples, "failed": failed[0], "sent": i})


@dataclass
class Probe:
    bootstrap: str
    rate: int
    idempotent: bool = False
    process: Any = None
    conn: Any = None

    def __enter__(self) -> Probe:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=_probe, args=(self.bootstrap, self.rate, self.idempotent, child),
            daemon=True)
        self.process.start()
        return self

    def finish(self) -> dict[str, Any]:
        self.conn.send("stop")
        result: dict[str, Any] = self.conn.recv()
        self.process.join(30)
        return result

    def __exit__(self, *exc: object) -> None:
        if self.process.is_alive():
            self.process.kill()


# -- targets -------------------------------------------------------------------------------

#: A directory and two files slower than this means the filesystem has not settled yet
#: (about 100 us on a quiet one here).
SETTLED_US = 200.0


def settle_disk(probes: list[Path], timeout_s: float = 60.0) -> None:
    """Wait until creating files costs what it does on a quiet filesystem. Deleting the
    previous target's thousands of log directories makes each ext4 file creation cost
    ten to twenty times more kernel time for about ten seconds after (measured here: 1,000
    directories with two files each took 0.08 s before an ``rmtree`` of 3,000 such
    directories and 0.5-1.4 s for 8 s after), which would be charged to the next target.
    Each probe makes a temporary directory as the targets do, added to ``probes`` (kept
    until the bench ends: deleting it would disturb the filesystem again)."""
    deadline = time.monotonic() + timeout_s
    while True:
        probe = Path(tempfile.mkdtemp(prefix="admin-bench-settle-"))
        probes.append(probe)
        began = time.perf_counter()
        for i in range(300):  # as a partition's log: a directory and two files
            (probe / f"d{i}").mkdir()
            (probe / f"d{i}" / "a").touch()
            (probe / f"d{i}" / "b").touch()
        cost_us = (time.perf_counter() - began) / 300 * 1e6
        if cost_us < SETTLED_US or time.monotonic() > deadline:
            return
        time.sleep(1.0)

@contextlib.contextmanager
def target(kind: str, source: str | None) -> Iterator[tuple[str, int]]:
    """(bootstrap, replication factor of the healthy topic) of a fresh target."""
    if kind == "strom":
        broker = start_strom({"num.partitions": "1"}, source=source)
        try:
            yield broker.bootstrap, 1
        finally:
            broker.stop()
    elif kind == "kafka":
        node = start_kafka()
        try:
            yield node.bootstrap, 1
        finally:
            node.stop()
    elif kind == "kafka-cluster":
        with start_kafka_cluster(3) as kafka_cluster:
            admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})
            deadline = time.monotonic() + 60
            while len(admin.list_topics(timeout=10).brokers) < 3:  # all registered
                if time.monotonic() > deadline:
                    raise TimeoutError("the Kafka brokers did not all register")
                time.sleep(0.2)
            yield kafka_cluster.bootstrap, 3
    elif kind == "cluster":
        from strom.testing.cluster import EmbeddedCluster
        with source_tree(source), EmbeddedCluster(3) as cluster:
            yield cluster.bootstrap, 3
    else:
        raise ValueError(kind)


# -- one run -------------------------------------------------------------------------------

@dataclass
class Run:
    label: str
    acked_s: float
    visible_s: float
    topics: int
    idle: list[float] = field(default_factory=list)
    burst: list[float] = field(default_factory=list)
    gap_s: float = 0.0
    after: list[float] = field(default_factory=list)
    failed: int = 0
    errors: int = 0

    @property
    def rate(self) -> float:
        return self.topics / self.acked_s

    @property
    def visible_rate(self) -> float:
        return self.topics / self.visible_s


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def create_burst(admins: list[AdminClient], names: list[str], rf: int, mode: str) -> int:
    """Create the topics; returns how many failed."""
    futures: list[Any] = []
    if mode == "batched":
        for i in range(0, len(names), BATCH):
            futures += admins[0].create_topics(
                [NewTopic(n, 1, rf) for n in names[i:i + BATCH]],
                operation_timeout=120, request_timeout=300).values()
    else:  # one topic per request, spread over the clients (one: serial on its connection)
        clients = admins if mode == "concurrent" else admins[:1]
        for i, name in enumerate(names):
            futures += clients[i % len(clients)].create_topics(
                [NewTopic(name, 1, rf)], operation_timeout=120, request_timeout=300
            ).values()
    errors = 0
    for future in futures:
        try:
            future.result(600)
        except Exception as exc:  # counted and shown
            errors += 1
            if errors <= 3:
                print(f"    create failed: {exc}", file=sys.stderr)
    return errors


def wait_visible(admin: AdminClient, names: set[str], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        topics = admin.list_topics(timeout=60).topics
        if all(n in topics and topics[n].error is None
               and all(p.leader >= 0 for p in topics[n].partitions.values()) for n in names):
            return
        time.sleep(0.1)
    raise TimeoutError("the new topics did not all get a leader")


def one_run(kind: str, source: str | None, label: str, mode: str, args: argparse.Namespace
            ) -> Run:
    with target(kind, source) as (bootstrap, healthy_rf):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        config = {"min.insync.replicas": "2"} if healthy_rf == 3 else {}
        admin.create_topics([NewTopic(HEALTHY, 1, healthy_rf, config=config)]
                            )[HEALTHY].result(60)
        wait_visible(admin, {HEALTHY})
        rf = args.cluster_rf if kind in ("cluster", "kafka-cluster") else args.rf
        names = [f"burst-{i:05d}" for i in range(args.topics)]
        admins = [admin] + [AdminClient({"bootstrap.servers": bootstrap})
                            for _ in range(args.clients - 1)]
        for extra in admins[1:]:
            extra.list_topics(timeout=30)  # connected before the burst
        with Probe(bootstrap, args.rate, args.probe_idempotent) as probe:
            time.sleep(2.0 + args.idle)  # connect, then sample idle
            t0 = time.monotonic()
            errors = create_burst(admins, names, rf, mode)
            t1 = time.monotonic()
            wait_visible(admin, set(names))
            t2 = time.monotonic()
            time.sleep(1.0 + args.after)  # settle, then sample the idle new partitions
            result = probe.finish()
        samples = result["samples"]
        idle = [(a - s) * 1000 for s, a in samples if t0 - args.idle <= s < t0]
        burst = [(a - s) * 1000 for s, a in samples if t0 <= s <= t1]
        acks = sorted([t0] + [a for _, a in samples if t0 <= a <= t1] + [t1])
        gap = max((b - a for a, b in itertools.pairwise(acks)), default=0.0)
        after = [(a - s) * 1000 for s, a in samples if t2 + 1.0 <= s <= t2 + 1.0 + args.after]
        run = Run(label, t1 - t0, t2 - t0, args.topics, idle, burst, gap, after,
                  result["failed"], errors)
        print(f"  {label} {mode}: {run.rate:,.0f} partitions/s acked, "
              f"{run.visible_rate:,.0f}/s visible; producer p99 idle "
              f"{pct(idle, .99):.1f} ms, burst {pct(burst, .99):.1f} ms "
              f"(max {max(burst, default=0):.0f} ms, longest gap {gap:.2f} s, "
              f"{len(burst)} samples), after {pct(after, .99):.1f} ms "
              f"({len(after)} samples), create errors {errors}, send failures "
              f"{result['failed']}", file=sys.stderr, flush=True)
        return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default="strom,cluster,kafka")
    parser.add_argument("--modes", default="serial,concurrent,batched")
    parser.add_argument("--clients", type=int, default=16,
                        help="admin clients of the concurrent mode")
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rate", type=int, default=200, help="probe records/s")
    parser.add_argument("--probe-idempotent", action="store_true",
                        help="the probe producer is idempotent (up to 5 requests in flight)")
    parser.add_argument("--idle", type=float, default=8.0, help="idle sampling, seconds")
    parser.add_argument("--after", type=float, default=8.0,
                        help="sampling once the new topics have leaders, seconds")
    parser.add_argument("--rf", type=int, default=1)
    parser.add_argument("--cluster-rf", type=int, default=3)
    parser.add_argument("--also-source", action="append", default=[], metavar="DIR")
    parser.add_argument("--out")
    args = parser.parse_args()
    targets = args.targets.split(",")
    for kind in [k for k in targets if k.startswith("kafka") and not kafka_available()]:
        print(f"{kind}: no jars, skipped", file=sys.stderr)
        targets.remove(kind)
    variants: list[tuple[str, str, str | None]] = []
    for kind in targets:
        variants.append((kind, kind, None))
        if not kind.startswith("kafka"):
            variants += [(kind, f"{kind}@{s}", s) for s in args.also_source]
    runs: dict[tuple[str, str], list[Run]] = {}
    probes: list[Path] = []
    try:
        for _ in range(args.repeats):
            for mode in args.modes.split(","):
                for kind, label, source in variants:
                    settle_disk(probes)
                    runs.setdefault((label, mode), []).append(
                        one_run(kind, source, label, mode, args))
    finally:
        for probe in probes:
            shutil.rmtree(probe, ignore_errors=True)
    out = [f"{args.topics} one-partition topics per burst (RF {args.rf}, cluster RF "
           f"{args.cluster_rf}); probe producer acks=all at {args.rate} records/s on an "
           f"existing topic; medians of {args.repeats} runs (fresh target each):", "",
           "| target | mode | partitions/s (answered) | partitions/s (leaders in Metadata) | "
           "probe p99 idle ms | probe p99 burst ms | ratio | longest gap s | "
           "probe p99 after ms | runs (partitions/s answered; p99 ratio) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for (label, mode), rs in runs.items():
        idle99 = statistics.median(pct(r.idle, .99) for r in rs)
        burst99 = statistics.median(pct(r.burst, .99) for r in rs)
        ratios = [pct(r.burst, .99) / pct(r.idle, .99) for r in rs]
        out.append(
            f"| {label} | {mode} | {statistics.median(r.rate for r in rs):,.0f} | "
            f"{statistics.median(r.visible_rate for r in rs):,.0f} | {idle99:.1f} | "
            f"{burst99:.1f} | {statistics.median(ratios):.2f} | "
            f"{statistics.median(r.gap_s for r in rs):.2f} | "
            f"{statistics.median(pct(r.after, .99) for r in rs):.1f} | "
            + "; ".join(f"{r.rate:,.0f} {x:.2f}" for r, x in zip(rs, ratios, strict=True))
            + (f" ({sum(r.errors for r in rs)} create errors)"
               if any(r.errors for r in rs) else "") + " |")
    text = "\n".join(out)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
