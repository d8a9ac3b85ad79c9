"""What idle replicated partitions cost a healthy producer on a 3-broker cluster.

    python bench/idle_partitions_bench.py [--partitions 1000] [--rate 200] [--seconds 30]
                                          [--settle 10] [--also-source DIR]

A fresh 3-broker ``EmbeddedCluster`` (real ZooKeeper) per run: a healthy 1-partition topic
(RF 3, ``min.insync.replicas=2``), then ``--partitions`` one-partition RF-3 topics that
nobody writes to (created in ``create_topics`` calls of 100), ``--settle`` seconds for every
replica to open its logs and start following, then admin_bench's probe producer
(confluent-kafka in a process of its own, acks=all, ``linger.ms=0``, ``--rate`` records/s at
fixed times) for ``--seconds``. Every acks=all produce waits for a replication round, and
each round used to cost every partition the follower follows on both sides (a leader read
and noted them all, a follower rebuilt its request from them all), so this is the cost of
keeping many idle partitions in sync. Reported: the probe's p50 / p99 / max latency over the
run and over its last third (a probe that falls behind grows its latency for as long as it
runs). ``--also-source DIR`` runs the same with strom from another source tree, runs
interleaved.
"""

from __future__ import annotations

import argparse
import sys
import time

from confluent_kafka.admin import AdminClient, NewTopic

from admin_bench import HEALTHY, Probe, pct  # type: ignore[import-not-found]
from cluster_bench import source_tree  # type: ignore[import-not-found]

BATCH = 100


def one_run(source: str | None, args: argparse.Namespace) -> tuple[list[float], list[float]]:
    """(all latencies, those of the last third), milliseconds."""
    from strom.testing.cluster import EmbeddedCluster

    with source_tree(source), EmbeddedCluster(3) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 2})
        admin.create_topics([NewTopic(HEALTHY, 1, 3, config={"min.insync.replicas": "2"})]
                            )[HEALTHY].result(60)
        futures = []
        for start in range(0, args.partitions, BATCH):
            futures += admin.create_topics(
                [NewTopic(f"idle-{i:05d}", 1, 3)
                 for i in range(start, min(args.partitions, start + BATCH))],
                request_timeout=300).values()
        for future in futures:
            future.result(600)
        time.sleep(args.settle)
        with Probe(cluster.bootstrap, args.rate) as probe:
            time.sleep(2.0 + args.seconds)  # connect, then sample
            t0 = time.monotonic() - args.seconds
            result = probe.finish()
        samples = [(s, (a - s) * 1000) for s, a in result["samples"] if s >= t0]
        late = t0 + args.seconds * 2 / 3
        return [ms for _, ms in samples], [ms for s, ms in samples if s >= late]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=10.0)
    parser.add_argument("--also-source", action="append", default=[], metavar="DIR")
    args = parser.parse_args()
    print(f"{args.partitions} idle RF-3 partitions, probe acks=all at {args.rate} records/s "
          f"for {args.seconds:g} s after {args.settle:g} s of settling:\n")
    print("| tree | p50 ms | p99 ms | max ms | last third p50 ms | last third p99 ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, source in [("this tree", None)] + [(s, s) for s in args.also_source]:
        every, late = one_run(source, args)
        print(f"| {label} | {pct(every, .5):,.1f} | {pct(every, .99):,.1f} | "
              f"{max(every, default=float('nan')):,.1f} | {pct(late, .5):,.1f} | "
              f"{pct(late, .99):,.1f} |", flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
