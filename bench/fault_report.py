"""Run every real-process fault schedule (``strom.testing.chaos.catalogue``: the ones a plain
``pytest`` run keeps and the ``-m faults`` ones, data path and coordinators) with the given
seeds and report what was found, as Markdown tables (the ones in ``docs/reliability.md``).

    python bench/fault_report.py [--seeds 1,2,3] [--only NAME,...] [--out FILE]
                                 [--histories DIR]

Per schedule and seed: acknowledged / failed / unknown (timed out) sends, the anomalies the
checker found (``none``, or ``name=count``), whether that is what the schedule expects
(``single-cut-acked-tail`` loses acknowledged records on purpose: there the checker must find
them), and the run time. Each run gets a fresh :class:`~strom.testing.cluster.EmbeddedCluster`
(real ZooKeeper, ``tickTime=200``, 2 s sessions). The coordinator schedules get a table of
their own: transactions committed / aborted / unknown, group offset commits acknowledged, and
what the transaction and group checkers found. The exactly-once schedules
(``catalogue.EOS_SCHEDULES``: a consume-transform-produce application under coordinator,
leader and application kills, or a clean cluster restart) get a third: inputs, transactions
committed / aborted / unknown, duplicated and lost inputs, the commits before the first fault
and what the exactly-once checker found. Schedules that need network namespaces are
listed as skipped, with the reason, where this machine cannot make them (not root, no
iproute2). ``--histories DIR`` keeps each run's history as JSON lines for a post-mortem.
Exits 1 if any run did not end as expected.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from collections.abc import Callable
from pathlib import Path

from strom.testing.chaos import catalogue, netns


def anomalies(counts: dict[str, int]) -> str:
    return ", ".join(f"{name}={n}" for name, n in counts.items() if n) or "none"


def data_row(name: str, seed: int, history: Path | None) -> tuple[list[str], bool]:
    """The cells after (schedule, seed) of a data-path schedule's row, and its verdict."""
    entry = catalogue.SCHEDULES[name]
    expected = "none" if entry.expect_valid else "lost records"
    if entry.expect_probes:
        expected += "; probe " + ", ".join(str(a) for a in entry.expect_probes)
    if entry.expect_no_failover:
        expected += "; no failover"
    run = catalogue.run_named(entry, seed, history)
    found, stats = anomalies(run.check.counts), run.check.stats
    if entry.expect_probes:
        found += "; probe answered " + ", ".join(
            str(answer) for answer in catalogue.probe_answers(run))
    if entry.expect_no_failover:
        found += f"; {catalogue.state_changes(run)} partition state changes"
    return ([str(entry.brokers), str(stats.get("send-ok", 0)), str(stats.get("send-fail", 0)),
             str(stats.get("send-info", 0)), found, expected],
            catalogue.as_expected(entry, run))


def coordinator_row(name: str, seed: int, history: Path | None) -> tuple[list[str], bool]:
    """The cells after (schedule, seed) of a coordinator schedule's row, and its verdict."""
    run = catalogue.run_coordinator_named(catalogue.COORDINATOR_SCHEDULES[name], seed,
                                          history)
    txn, group = run.txn.stats, run.group.stats
    found = ", ".join(f for f in (anomalies(run.txn.counts), anomalies(run.group.counts))
                      if f != "none") or "none"
    return ([str(txn.get("txn-committed", 0)), str(txn.get("txn-aborted", 0)),
             str(txn.get("txn-unknown", 0)), str(group.get("commit-ok", 0)), found],
            run.valid)


def eos_row(name: str, seed: int, history: Path | None) -> tuple[list[str], bool]:
    """The cells after (schedule, seed) of an exactly-once schedule's row, and its verdict."""
    run = catalogue.run_eos_named(catalogue.EOS_SCHEDULES[name], seed, history)
    stats, counts = run.check.stats, run.check.counts
    return ([str(stats.get("inputs", 0)), str(stats.get("txn-committed", 0)),
             str(stats.get("txn-aborted", 0)), str(stats.get("txn-unknown", 0)),
             str(stats.get("duplicates", 0)), str(counts.get("input-lost", 0)),
             str(run.committed_at_fault), anomalies(counts)], run.valid)


DATA_HEADER = ("| schedule | seed | brokers | acknowledged | failed | unknown | anomalies found "
               "| expected | as expected | run time s |")
COORDINATOR_HEADER = ("| coordinator schedule | seed | transactions committed | aborted | "
                      "unknown | group commits acknowledged | anomalies found | as expected | "
                      "run time s |")
EOS_HEADER = ("| exactly-once schedule | seed | inputs | transactions committed | aborted | "
              "unknown | duplicated inputs | lost inputs | commits before the fault | "
              "anomalies found | as expected | run time s |")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated seeds")
    parser.add_argument("--only", help="comma-separated schedule names (default: all)")
    parser.add_argument("--out")
    parser.add_argument("--histories", type=Path)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    wanted = args.only.split(",") if args.only else [
        *catalogue.SCHEDULES, *catalogue.COORDINATOR_SCHEDULES, *catalogue.EOS_SCHEDULES]
    no_netns = netns.unavailable_reason()
    skipped = [f"{n} ({no_netns})" for n in wanted if n in catalogue.SCHEDULES
               and catalogue.SCHEDULES[n].network and no_netns is not None]
    tables: list[tuple[str, Callable[[str, int, Path | None], tuple[list[str], bool]],
                       list[str]]] = [
        (DATA_HEADER, data_row, [n for n in wanted if n in catalogue.SCHEDULES and not (
            catalogue.SCHEDULES[n].network and no_netns is not None)]),
        (COORDINATOR_HEADER, coordinator_row,
         [n for n in wanted if n in catalogue.COORDINATOR_SCHEDULES]),
        (EOS_HEADER, eos_row, [n for n in wanted if n in catalogue.EOS_SCHEDULES])]
    started = datetime.datetime.now(datetime.UTC)
    lines: list[str] = []
    ran = unexpected = schedules = 0
    for header, row, names in tables:
        if not names:
            continue
        schedules += len(names)
        lines += ["" if lines else header, *([header] if lines else []),
                  "|---" * header.count(" | ") + "|---|"]
        for name in names:
            for seed in seeds:
                history = None
                if args.histories is not None:
                    args.histories.mkdir(parents=True, exist_ok=True)
                    history = args.histories / f"{name}-{seed}.jsonl"
                t0 = time.monotonic()
                try:
                    cells, ok = row(name, seed, history)
                except Exception as exc:  # a schedule that crashed is a finding, not the end
                    cells, ok = [f"run failed: {type(exc).__name__}: {exc}"], False
                ran += 1
                unexpected += not ok
                line = " | ".join(["", name, str(seed), *cells, "yes" if ok else "**NO**",
                                   f"{time.monotonic() - t0:.0f} |"]).strip()
                print(line, file=sys.stderr, flush=True)
                lines.append(line)
    lines += ["", f"{ran} runs ({schedules} schedules x {len(seeds)} seeds), "
              f"{ran - unexpected} as expected, {unexpected} not; started "
              f"{started:%Y-%m-%d %H:%M} UTC."]
    if skipped:
        lines.append("Skipped: " + "; ".join(skipped) + ".")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
