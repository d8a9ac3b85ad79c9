"""The consumer-group checker: a pure function over a group run's history (``commit``
operations written by :mod:`strom.testing.chaos.group_workload`, nemesis events) and the
group's committed offsets fetched after the run.

What an acknowledged commit promises, stated conservatively. Per partition *p*:

* *last(p)*: the acknowledged commit of *p* whose acknowledgement came last in the history
  (members only commit what they consumed, from the committed offset on, so the owner's
  commits only move forward; an older owner's commit acknowledged before a rebalance may
  legitimately be overtaken by a lower one from the new owner while the rebalance races it,
  so only the last acknowledgement is binding);
* *unknown(p)*: the offsets of commits of *p* whose outcome is unknown (``info`` or never
  completed) — any of them may have been written after *last(p)*.

Anomaly classes:

=======================  ==========================================================================
``commit-lost``          the final committed offset of *p* is absent, or below last(p)'s offset
                         and not one of unknown(p) (an acknowledged commit was lost or rolled
                         back, e.g. by a coordinator that loaded a stale log)
``commit-unexpected``    the final committed offset of *p* is no offset any acknowledged or
                         unknown commit of *p* carried
``group-not-reformed``   a partition with no acknowledged commit invoked after the faults were
                         healed (the group did not re-form or made no progress once the
                         coordinator moved); judged only when ``expect_progress``
=======================  ==========================================================================
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from strom.testing.chaos.checker import CheckResult
from strom.testing.chaos.history import NEMESIS, Op, completions

COMMIT_LOST = "commit-lost"
COMMIT_UNEXPECTED = "commit-unexpected"
NOT_REFORMED = "group-not-reformed"
ANOMALIES = (COMMIT_LOST, COMMIT_UNEXPECTED, NOT_REFORMED)
COMMIT = "commit"
MAX_EXAMPLES = 20


@dataclass(frozen=True)
class _Ack:
    partition: int
    offset: int
    member: str
    invoked: float
    index: int  # the completion's place in the history


def check_group(ops: Sequence[Op], final: Mapping[int, int], partitions: Iterable[int], *,
                expect_progress: bool = True) -> CheckResult:
    """``final``: partition → committed offset after the run (absent: none)."""
    result = CheckResult(anomalies={name: [] for name in ANOMALIES},
                         counts=dict.fromkeys(ANOMALIES, 0))

    def add(kind: str, **example: object) -> None:
        result.counts[kind] += 1
        if len(result.anomalies[kind]) < MAX_EXAMPLES:
            result.anomalies[kind].append(example)

    done = completions(list(ops))
    acked: dict[int, list[_Ack]] = defaultdict(list)
    unknown: dict[int, set[int]] = defaultdict(set)
    stats: Counter[str] = Counter()
    for op in ops:
        if op.f != COMMIT or op.type != "invoke":
            continue
        completion = done.get(op.index)
        kind = completion.type if completion is not None else "info"
        stats[f"commit-{kind}"] += 1
        offsets = {int(p): int(o) for p, o in op.value["offsets"].items()}
        if kind == "ok" and completion is not None:
            refused = {int(p) for p in completion.value.get("errors", {})}
            for p, offset in offsets.items():
                if p not in refused:
                    acked[p].append(_Ack(p, offset, op.process, op.time, completion.index))
        elif kind == "info":
            for p, offset in offsets.items():
                unknown[p].add(offset)
    stats["partitions-acknowledged"] = sum(len(a) for a in acked.values())
    healed = max((op.time for op in ops if op.process == NEMESIS and op.f == "healed"),
                 default=0.0)
    for p in sorted(partitions):
        acks = sorted(acked.get(p, []), key=lambda a: a.index)
        committed = final.get(p)
        if acks:
            last = acks[-1]
            if committed is None or (committed < last.offset
                                     and committed not in unknown.get(p, set())):
                add(COMMIT_LOST, partition=p, committed=committed, last_ack=last.offset,
                    member=last.member)
        if committed is not None and committed not in {a.offset for a in acks} \
                and committed not in unknown.get(p, set()):
            add(COMMIT_UNEXPECTED, partition=p, committed=committed)
        if expect_progress and not any(a.invoked > healed for a in acks):
            add(NOT_REFORMED, partition=p, healed_at=round(healed, 3),
                last_ack=round(acks[-1].invoked, 3) if acks else None)
    result.stats = dict(stats)
    return result
