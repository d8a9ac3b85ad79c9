"""Failover after kill -9, with the brokers' DEFAULT settings (18 s ZooKeeper session,
``replica.lag.time.max.ms`` 30 s): how long acks=all produces stall on the partitions the
killed broker led or followed. The distribution in ``docs/reliability.md`` comes from here.

    python bench/failover_bench.py [--kills 10] [--kinds leader,follower,controller]
                                   [--rate 200] [--set KEY=VALUE ...] [--source DIR]
                                   [--out FILE]

A 4-broker :class:`~strom.testing.cluster.EmbeddedCluster` (real ZooKeeper, ``tickTime=200``;
the brokers get ``zookeeper.session.timeout.ms=18000``, the broker default, instead of the
fixture's 2 s) and one topic of 4 partitions, replication factor 3, ``min.insync.replicas=2``,
placed by hand so that brokers 0, 1 and 2 are the preferred leaders and broker 3 only
follows (p0 [0,1,3], p1 [1,2,3], p2 [2,0,3], p3 [0,1,2]). An idempotent ``acks=all``
confluent-kafka producer (librdkafka's defaults otherwise) sends ``--rate`` records/s
round-robin over the partitions the whole time.

Each round kills one broker with SIGKILL, chosen by the kind that has the fewest samples:

* ``leader`` — a broker that is not the controller and leads a partition;
* ``follower`` — a broker that is not the controller and leads nothing (an ISR member);
* ``controller`` — the controller, when it leads a partition (the controller-that-leads);
  when the controller leads nothing, killing it counts as ``controller-follower`` (and moves
  the controller, so a later round can find one that leads).

Measured from the kill, per round: **led** — until every partition the victim led has
acknowledged a record sent after the kill; **followed** — the same for the partitions where it
was an in-sync follower; **zk** — until ZooKeeper's partition states no longer name the victim
(leader moved, ISR without it); **gone** — until its registration ``/brokers/ids/<id>`` is
gone. Then the victim is started again, the ISRs fill up, a preferred-leader election gives
brokers 0, 1 and 2 their partitions back, and the next round starts once the producer has had
a record acknowledged on every partition since, and a second of quiet.
The table reports min / median / p90 / max per kind and the load average (``uptime``) at the
start and the end: the machine is shared, and timing depends on it.

``--source DIR`` runs the brokers from another source tree (e.g. the tree before a change),
``--set KEY=VALUE`` sets a broker config on every broker (e.g. a short session to compare).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from cluster_bench import SteadyProducer, source_tree  # type: ignore[import-not-found]
from strom.testing.chaos.zkview import ZooKeeperView
from strom.testing.cluster import EmbeddedCluster

TOPIC = "failover"
BROKERS = 4
ASSIGNMENT = [[0, 1, 3], [1, 2, 3], [2, 0, 3], [0, 1, 2]]
PARTITIONS = len(ASSIGNMENT)
#: The broker default (``zookeeper.session.timeout.ms``); EmbeddedCluster's own is 2 s.
DEFAULT_SESSION_MS = 18000
KINDS = ("leader", "follower", "controller")
ROUND_TIMEOUT_S = 90.0


@dataclass
class Round:
    kind: str
    victim: int
    led: list[int]
    followed: list[int]
    led_s: float | None
    followed_s: float | None
    zk_s: float | None
    gone_s: float | None
    load: float


def states(view: ZooKeeperView) -> dict[int, dict[str, object]]:
    return {p: view.partition_state(TOPIC, p) or {} for p in range(PARTITIONS)}


def choose(view: ZooKeeperView, counts: dict[str, int], wanted: list[str], kills: int
           ) -> tuple[str, int] | None:
    """The next (kind, victim), or None when every wanted kind has ``kills`` samples."""
    controller = view.controller()
    leaders = {int(str(s["leader"])) for s in states(view).values()}
    options: dict[str, int] = {}
    for broker in sorted(view.brokers()):
        if broker == controller:
            options["controller" if broker in leaders else "controller-follower"] = broker
        elif broker in leaders:
            options.setdefault("leader", broker)
        else:
            options.setdefault("follower", broker)
    due = [k for k in wanted if counts.get(k, 0) < kills]
    if not due:
        return None
    ready = [k for k in due if k in options]
    if ready:
        kind = min(ready, key=lambda k: counts.get(k, 0))
        return kind, options[kind]
    # only the controller-that-leads is due, and the controller leads nothing: move it
    return "controller-follower", options["controller-follower"]


def one_round(cluster: EmbeddedCluster, view: ZooKeeperView, producer: SteadyProducer,
              kind: str, victim: int) -> Round:
    before = states(view)
    led = [p for p, s in before.items() if s.get("leader") == victim]
    followed = [p for p, s in before.items()
                if s.get("leader") != victim and victim in (s.get("isr") or [])]
    load = os.getloadavg()[0]
    killed = time.monotonic()
    producer.mark(killed)
    cluster.brokers[victim].kill()
    zk_s = gone_s = None
    affected = led + followed
    deadline = killed + ROUND_TIMEOUT_S
    while time.monotonic() < deadline:
        now = time.monotonic()
        if gone_s is None and victim not in view.brokers():
            gone_s = now - killed
        if zk_s is None:
            current = states(view)
            if all(current[p].get("leader") != victim
                   and victim not in (current[p].get("isr") or []) for p in affected):
                zk_s = now - killed
        if gone_s is not None and zk_s is not None and all(
                p in producer.acked_after for p in affected):
            break
        time.sleep(0.02)
    acked = dict(producer.acked_after)

    def resumed(partitions: list[int]) -> float | None:
        if not partitions or any(p not in acked for p in partitions):
            return None
        return max(acked[p] for p in partitions) - killed

    result = Round(kind, victim, led, followed, resumed(led), resumed(followed), zk_s, gone_s,
                   load)
    print(f"  {kind}: killed {victim} (led {led}, followed {followed}): "
          f"led {fmt(result.led_s)} s, followed {fmt(result.followed_s)} s, "
          f"zk {fmt(zk_s)} s, registration gone {fmt(gone_s)} s, load {load:.1f}",
          file=sys.stderr, flush=True)
    cluster.brokers[victim].start()
    cluster.wait_for_brokers(BROKERS, 120)
    view.wait_for("every ISR full", lambda: all(
        len(s.get("isr") or []) == 3 for s in states(view).values()), 120)
    prefer(cluster.bootstrap, view)
    settle(producer)
    return result


def settle(producer: SteadyProducer, timeout: float = 60.0) -> None:
    """Until every partition acknowledged a record sent from now on (the producer follows
    the leaders again), then a second of quiet."""
    producer.mark(time.monotonic())
    deadline = time.monotonic() + timeout
    while len(producer.acked_after) < PARTITIONS and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)


def prefer(bootstrap: str, view: ZooKeeperView) -> None:
    """A preferred-leader election until the preferred leaders lead their partitions again."""
    from confluent_kafka import ElectionType, TopicPartition

    admin = AdminClient({"bootstrap.servers": bootstrap})

    def preferred() -> bool:
        return all(s.get("leader") == ASSIGNMENT[p][0] for p, s in states(view).items())

    deadline = time.monotonic() + 60
    while not preferred():
        with contextlib.suppress(Exception):
            admin.elect_leaders(ElectionType.PREFERRED,
                                [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
                                ).result(10)
        if time.monotonic() > deadline:
            raise TimeoutError("the preferred leaders did not take their partitions back")
        time.sleep(0.5)


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def distribution(values: list[float]) -> str:
    """min / median / p90 / max (nearest rank) of ``values``."""
    ordered = sorted(values)
    p90 = ordered[max(0, -(-9 * len(ordered) // 10) - 1)]
    return (f"{ordered[0]:.2f} | {statistics.median(ordered):.2f} | {p90:.2f} | "
            f"{ordered[-1]:.2f}")


def table(rounds: list[Round]) -> list[str]:
    lines = ["| killed | measured | n | min s | median s | p90 s | max s |",
             "|---|---|---|---|---|---|---|"]
    for kind in (*KINDS, "controller-follower"):
        mine = [r for r in rounds if r.kind == kind]
        measures: list[tuple[str, Callable[[Round], float | None], Callable[[Round], bool]]] = [
            ("acks resumed: partitions it led", lambda r: r.led_s, lambda r: bool(r.led)),
            ("acks resumed: partitions it followed", lambda r: r.followed_s,
             lambda r: bool(r.followed)),
            ("ZooKeeper states without it", lambda r: r.zk_s, lambda r: True),
            ("its registration gone", lambda r: r.gone_s, lambda r: True)]
        for label, pick, applies in measures:
            applicable = [r for r in mine if applies(r)]
            if not applicable:
                continue
            values = [v for r in applicable if (v := pick(r)) is not None]
            missing = len(applicable) - len(values)
            cells = distribution(values) if values else "- | - | - | -"
            note = (f" ({missing} not within {ROUND_TIMEOUT_S:.0f} s)" if missing else "")
            lines.append(f"| {kind} | {label}{note} | {len(values)} | {cells} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=10, help="samples per kind")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--rate", type=int, default=200, help="records/s, all partitions")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting for every broker")
    parser.add_argument("--source", help="run the brokers from this source tree")
    parser.add_argument("--out")
    args = parser.parse_args()
    wanted = args.kinds.split(",")
    configs: dict[str, object] = {"zookeeper.session.timeout.ms": DEFAULT_SESSION_MS}
    configs.update(kv.split("=", 1) for kv in args.set)
    started = datetime.datetime.now(datetime.UTC)
    load0 = os.getloadavg()
    rounds: list[Round] = []
    with source_tree(args.source), EmbeddedCluster(BROKERS, configs=configs) as cluster:
        view = ZooKeeperView(cluster.zookeeper_connect)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        topic = NewTopic(TOPIC, num_partitions=PARTITIONS, replica_assignment=ASSIGNMENT,
                         config={"min.insync.replicas": "2"})
        admin.create_topics([topic])[TOPIC].result(30)
        view.wait_for("every ISR full", lambda: all(
            len(s.get("isr") or []) == 3 for s in states(view).values()), 60)
        producer = SteadyProducer(cluster.bootstrap, TOPIC, args.rate, PARTITIONS,
                                  message_timeout_ms=300000)
        try:
            time.sleep(3.0)
            counts: dict[str, int] = {}
            while (choice := choose(view, counts, wanted, args.kills)) is not None:
                kind, victim = choice
                rounds.append(one_round(cluster, view, producer, kind, victim))
                counts[kind] = counts.get(kind, 0) + 1
                if len(rounds) > 4 * args.kills * len(wanted):
                    break  # the controller would not lead: report what there is
        finally:
            producer.close()
            view.close()
    load1 = os.getloadavg()
    settings = ", ".join(f"{k}={v}" for k, v in configs.items())
    out = [f"{BROKERS} brokers + ZooKeeper (tickTime=200), {settings}, otherwise broker "
           f"defaults; {PARTITIONS} partitions RF=3 min.insync.replicas=2; idempotent acks=all "
           f"producer at {args.rate} records/s; started {started:%Y-%m-%d %H:%M} UTC; load "
           f"average {load0[0]:.1f} / {load0[1]:.1f} / {load0[2]:.1f} at the start, "
           f"{load1[0]:.1f} / {load1[1]:.1f} / {load1[2]:.1f} at the end"
           + (f"; brokers from {args.source}" if args.source else "") + ":", "",
           *table(rounds), "", f"producer errors: {producer.errors}"]
    text = "\n".join(out)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
