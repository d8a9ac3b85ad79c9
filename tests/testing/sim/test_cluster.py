"""The deterministic simulation: hundreds of seeded schedules pass the chaos checker, one seed
replays exactly, and a planted bug (a high watermark that ignores the ISR) is caught."""

from __future__ import annotations

import time

from strom.testing.sim.cluster import run_simulation
from strom.testing.sim.faults import PLANTED
from strom.testing.sim.replay import replay_command

SEEDS = range(200)
#: Seeds whose schedules the checker rejects without any planted bug, each for a reason known
#: not to be a strom bug. Not hidden: the test below asserts they still fail, so a change that
#: fixes one shows up as a test to update.
KNOWN_FAILING = frozenset({
    # acked-below-min-isr, a checker false positive: a follower's store session expired and the
    # controller shrank the store's ISR to the leader alone, while the leader, cut from the
    # store, still had that follower in its ISR and acked only once the follower had fetched
    # the record (on 2 replicas, as Kafka acks; nothing lost). The checker sees only the
    # store's ISR, not the leader's.
    60,
    153,
})


def test_hundreds_of_schedules_pass_the_checker() -> None:
    started = time.monotonic()
    failures = []
    acknowledged = faults = 0
    for seed in SEEDS:
        outcome = run_simulation(seed)
        acknowledged += outcome.result.stats.get("send-ok", 0)
        faults += outcome.stats["faults"]
        if outcome.valid == (seed in KNOWN_FAILING):
            failures.append(f"seed {seed} (known failing: {seed in KNOWN_FAILING}): "
                            f"{outcome.result.summary()}\n"
                            f"  replay: {replay_command(seed)}")
    elapsed = time.monotonic() - started
    print(f"{len(SEEDS)} seeds in {elapsed:.1f} s: {acknowledged} acknowledged sends, "
          f"{faults} faults")
    assert not failures, "\n".join(failures)
    assert acknowledged > 20 * len(SEEDS)  # the schedules did produce under faults
    assert faults > 5 * len(SEEDS)


def test_a_seed_replays_exactly() -> None:
    first, second = run_simulation(7), run_simulation(7)
    assert first.faults == second.faults
    assert [(op.f, op.type, dict(op.value), op.time) for op in first.history.ops] == [
        (op.f, op.type, dict(op.value), op.time) for op in second.history.ops]


def test_a_planted_bug_is_found() -> None:
    bug = "hw-ignores-isr"
    failing = []
    for seed in range(40):
        outcome = run_simulation(seed, partition_type=PLANTED[bug])
        if not outcome.valid:
            failing.append(seed)
            print(f"seed {seed} fails with the planted bug: {outcome.result.summary()}\n"
                  f"  replay: {replay_command(seed, bug)}")
            assert outcome.result.counts["lost"] or outcome.result.counts[
                "ack-offset-mismatch"] or outcome.result.counts["acked-below-min-isr"]
            if len(failing) == 3:
                break
    assert failing, "the simulation did not catch a high watermark that ignores the ISR"
    assert run_simulation(failing[0]).valid  # the same schedule is clean without the bug
