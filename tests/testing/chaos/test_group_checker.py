"""The group checker over planted histories: acknowledged commits are binding only as the last
acknowledgement per partition, unknown commits may land, and the group must commit again
after the faults were healed."""

from __future__ import annotations

from strom.testing.chaos import group_checker
from strom.testing.chaos.group_checker import check_group
from strom.testing.chaos.history import History


def commit(history: History, member: str, offsets: dict[int, int], outcome: str,
           errors: dict[int, str] | None = None) -> None:
    invoke = history.invoke(member, "commit", {"member": member, "offsets": offsets})
    if outcome != "pending":
        history.complete(invoke, outcome,  # type: ignore[arg-type]
                         {"errors": errors or {}})


def base() -> History:
    history = History()
    commit(history, "m0", {0: 10, 1: 20}, "ok")
    history.nemesis("healed")
    commit(history, "m1", {0: 15}, "ok")
    commit(history, "m0", {1: 25}, "ok")
    return history


def test_a_clean_run_passes() -> None:
    result = check_group(base().ops, {0: 15, 1: 25}, [0, 1])
    assert result.valid, result.summary()
    assert result.stats["commit-ok"] == 3


def test_a_final_offset_below_the_last_acknowledgement_is_lost() -> None:
    result = check_group(base().ops, {0: 10, 1: 25}, [0, 1])
    assert result.counts[group_checker.COMMIT_LOST] == 1
    assert result.anomalies[group_checker.COMMIT_LOST][0]["last_ack"] == 15
    missing = check_group(base().ops, {1: 25}, [0, 1])
    assert missing.counts[group_checker.COMMIT_LOST] == 1


def test_an_unknown_commit_may_have_landed_last_but_nothing_else() -> None:
    history = base()
    commit(history, "m0", {0: 12}, "info")
    assert check_group(history.ops, {0: 12, 1: 25}, [0, 1]).valid
    result = check_group(history.ops, {0: 13, 1: 25}, [0, 1])
    assert result.counts[group_checker.COMMIT_LOST] == 1
    assert result.counts[group_checker.COMMIT_UNEXPECTED] == 1


def test_a_refused_partition_is_not_an_acknowledgement() -> None:
    history = base()
    commit(history, "m1", {0: 30}, "ok", errors={0: "ILLEGAL_GENERATION"})
    assert check_group(history.ops, {0: 15, 1: 25}, [0, 1]).valid


def test_no_commit_after_the_heal_means_the_group_did_not_re_form() -> None:
    history = History()
    commit(history, "m0", {0: 10, 1: 20}, "ok")
    history.nemesis("healed")
    commit(history, "m0", {0: 12}, "ok")
    result = check_group(history.ops, {0: 12, 1: 20}, [0, 1])
    assert result.counts[group_checker.NOT_REFORMED] == 1
    assert result.anomalies[group_checker.NOT_REFORMED][0]["partition"] == 1
    assert check_group(history.ops, {0: 12, 1: 20}, [0, 1], expect_progress=False).valid
