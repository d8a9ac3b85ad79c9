"""Replay or sweep simulation seeds::

    python -m strom.testing.sim --seed 17 [--bug hw-ignores-isr] [--verbose]
    python -m strom.testing.sim --seeds 0:300

Prints each seed's checker summary and, with ``--verbose``, the nemesis's faults and the
anomalies; exits 1 if any seed is invalid.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from strom.testing.sim.cluster import run_simulation
from strom.testing.sim.faults import PLANTED
from strom.testing.sim.replay import replay_command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m strom.testing.sim")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--seeds", help="START:END, END excluded")
    parser.add_argument("--bug", choices=sorted(PLANTED))
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    if args.seed is not None:
        seeds = [args.seed]
    else:
        start, _, end = (args.seeds or "0:100").partition(":")
        seeds = list(range(int(start), int(end)))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.ERROR)
    failed = 0
    for seed in seeds:
        outcome = run_simulation(seed, partition_type=PLANTED[args.bug]) if args.bug else (
            run_simulation(seed))
        print(f"seed {seed}: {outcome.result.summary()}")
        if args.verbose:
            for fault in outcome.faults:
                print("  fault", fault)
        if not outcome.valid:
            failed += 1
            for kind, examples in outcome.result.anomalies.items():
                for example in examples[:5]:
                    print(f"  {kind}: {json.dumps(example, default=str)}")
            print(f"  replay: {replay_command(seed, args.bug)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
