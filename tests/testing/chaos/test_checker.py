"""The checker over crafted histories: a clean run passes, and each anomaly class is found
(each test fails if the checker misses the anomaly it plants)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable

import pytest

from strom.testing.chaos import checker
from strom.testing.chaos.checker import CheckConfig, check
from strom.testing.chaos.history import History
from strom.testing.chaos.model import ReadRecord, ReplicaLog


class Run:
    """A history being written: sends with their outcomes, polls, partition states."""

    def __init__(self) -> None:
        self.history = History()

    def send(self, value: str, outcome: str = "ok", partition: int = 0,
             offset: int | None = None, error: str = "",
             witness: dict[str, list[int]] | None = None) -> None:
        invoke = self.history.invoke("p0", "send", {"value": value, "topic": "t"})
        if outcome == "ok":
            self.history.complete(invoke, "ok", {"partition": partition, "offset": offset,
                                                 **(witness or {})})
        elif outcome in ("fail", "info"):
            self.history.complete(invoke, outcome, {"error": error or "X"})  # type: ignore[arg-type]

    def poll(self, value: str, partition: int, offset: int) -> None:
        self.history.event("r0", "ok", "poll",
                           {"value": value, "partition": partition, "offset": offset})

    def state(self, leader: int, isr: Iterable[int], version: int, epoch: int = 0,
              partition: int = 0, mtime: float | None = None) -> None:
        self.history.event("observer", "ok", "partition-state",
                           {"partition": partition, "leader": leader, "leader_epoch": epoch,
                            "isr": list(isr), "version": version,
                            **({} if mtime is None else {"mtime": mtime})})

    @property
    def ops(self):  # type: ignore[no-untyped-def]
        return self.history.ops


def reads(values: list[str], partition: int = 0, start: int = 0) -> list[ReadRecord]:
    return [ReadRecord(partition, start + i, v) for i, v in enumerate(values)]


def replica(broker: int, values: list[str], start: int = 0) -> ReplicaLog:
    return ReplicaLog(broker, 0, tuple(reads(values, start=start)), start, None)


def clean_run() -> Run:
    run = Run()
    for i in range(5):
        run.send(f"v{i}", partition=0, offset=i)
    return run


def found(result: checker.CheckResult) -> set[str]:
    return {name for name, n in result.counts.items() if n}


def test_a_clean_run_is_valid() -> None:
    run = clean_run()
    run.send("maybe", "info")            # unknown outcome, absent: fine
    run.send("written", "info")          # unknown outcome, present: fine too
    run.send("refused", "fail", error="NOT_ENOUGH_REPLICAS")
    run.poll("v1", 0, 1)
    final = {0: reads([f"v{i}" for i in range(5)] + ["written"])}
    logs = {0: {1: replica(1, [f"v{i}" for i in range(5)] + ["written"]),
                2: replica(2, [f"v{i}" for i in range(5)] + ["written"])}}
    result = check(run.ops, final, logs)
    assert result.valid, result.summary()
    assert result.stats["send-ok"] == 5 and result.stats["send-info-present"] == 1
    assert result.stats["send-fail"] == 1 and result.stats["replicas"] == 2


def test_an_acknowledged_record_missing_from_the_final_read_is_lost() -> None:
    result = check(clean_run().ops, {0: reads(["v0", "v1", "v2", "v3"])})
    assert found(result) == {checker.LOST}
    assert result.anomalies[checker.LOST] == [{"value": "v4", "acked_at": (0, 4)}]


def test_an_invoke_without_completion_counts_as_unknown() -> None:
    run = clean_run()
    run.send("pending", "none")
    assert check(run.ops, {0: reads([f"v{i}" for i in range(5)])}).valid
    assert check(run.ops, {0: reads([f"v{i}" for i in range(5)] + ["pending"])}).valid


def test_a_record_read_elsewhere_than_acknowledged() -> None:
    result = check(clean_run().ops, {0: reads(["v0", "v1", "v2", "v4", "v3"])})
    assert found(result) == {checker.ACK_MISMATCH}
    assert {e["value"] for e in result.anomalies[checker.ACK_MISMATCH]} == {"v3", "v4"}


def test_duplicates() -> None:
    result = check(clean_run().ops, {0: reads(["v0", "v1", "v2", "v3", "v4", "v2"])})
    assert found(result) == {checker.DUPLICATED}
    assert result.anomalies[checker.DUPLICATED] == [{"value": "v2", "at": [(0, 2), (0, 5)]}]


def test_a_duplicate_across_partitions() -> None:
    final = {0: reads([f"v{i}" for i in range(5)]), 1: reads(["v3"], partition=1)}
    assert found(check(clean_run().ops, final)) == {checker.DUPLICATED}


def test_a_value_never_sent_is_unexpected() -> None:
    result = check(clean_run().ops, {0: reads(["v0", "v1", "v2", "v3", "v4", "ghost"])})
    assert found(result) == {checker.UNEXPECTED}


def test_a_definitely_failed_send_read_back() -> None:
    run = clean_run()
    run.send("refused", "fail", error="NOT_ENOUGH_REPLICAS")
    result = check(run.ops, {0: reads([f"v{i}" for i in range(5)] + ["refused"])})
    assert found(result) == {checker.FAILED_BUT_READ}
    assert result.anomalies[checker.FAILED_BUT_READ][0]["error"] == "NOT_ENOUGH_REPLICAS"


def test_offset_gaps_and_reuse() -> None:
    run = clean_run()
    gap = [ReadRecord(0, o, f"v{i}") for i, o in enumerate([0, 1, 2, 4, 5])]
    run_gap = Run()
    for record in gap:
        run_gap.send(record.value, offset=record.offset)
    assert found(check(run_gap.ops, {0: gap})) == {checker.OFFSET_GAP}

    reuse = [ReadRecord(0, o, f"v{i}") for i, o in enumerate([0, 1, 2, 2, 3])]
    run_reuse = Run()
    for record in reuse:
        run_reuse.send(record.value, offset=record.offset)
    assert checker.OFFSET_REUSE in found(check(run_reuse.ops, {0: reuse}))
    assert run.ops  # the clean run is untouched


def test_a_replica_that_disagrees_with_the_final_read() -> None:
    values = [f"v{i}" for i in range(5)]
    logs = {0: {1: replica(1, values), 2: replica(2, [*values[:3], "other", "v4"])}}
    result = check(clean_run().ops, {0: reads(values)}, logs)
    assert found(result) == {checker.DIVERGENT}
    assert result.anomalies[checker.DIVERGENT][0]["offset"] == 3


def test_replicas_that_disagree_above_the_committed_end() -> None:
    values = [f"v{i}" for i in range(5)]
    logs = {0: {1: replica(1, [*values, "x"]), 2: replica(2, [*values, "y"])}}
    run = clean_run()
    run.send("x", "info")
    run.send("y", "info")
    result = check(run.ops, {0: reads(values)}, logs)
    assert found(result) == {checker.DIVERGENT}
    assert result.anomalies[checker.DIVERGENT][0]["replicas"] == {1: "x", 2: "y"}


def test_a_replica_missing_committed_records() -> None:
    values = [f"v{i}" for i in range(5)]
    logs = {0: {1: replica(1, values), 2: replica(2, values[:3])}}
    result = check(clean_run().ops, {0: reads(values)}, logs)
    assert found(result) == {checker.REPLICA_MISSING}
    assert result.anomalies[checker.REPLICA_MISSING] == [
        {"partition": 0, "broker": 2, "first": 3, "count": 2}]
    # records below a replica's log start (deleted by retention) are not missing
    logs = {0: {1: replica(1, values), 2: replica(2, values[2:], start=2)}}
    assert check(clean_run().ops, {0: reads(values)}, logs).valid


def test_a_replica_labelled_with_another_topic_id() -> None:
    """Same bytes, another topic: a deleted topic's log kept under the new one's name."""
    values = [f"v{i}" for i in range(5)]

    def labelled(broker: int, topic_id: str | None) -> ReplicaLog:
        return dataclasses.replace(replica(broker, values), topic_id=topic_id)

    logs = {0: {1: labelled(1, "new"), 2: labelled(2, "new"), 3: labelled(3, "old")}}
    result = check(clean_run().ops, {0: reads(values)}, logs)
    assert found(result) == {checker.REPLICA_TOPIC_ID}
    assert result.anomalies[checker.REPLICA_TOPIC_ID] == [
        {"partition": 0, "broker": 3, "topic_id": "old", "expected": "new"}]
    # with the topic's id known, every replica is held to it (a majority can be wrong too)
    result = check(clean_run().ops, {0: reads(values)}, logs, topic_id="old")
    assert result.counts[checker.REPLICA_TOPIC_ID] == 2
    logs = {0: {1: labelled(1, "new"), 2: labelled(2, "new")}}
    assert check(clean_run().ops, {0: reads(values)}, logs, topic_id="new").valid


def test_a_record_a_reader_saw_that_later_vanished() -> None:
    run = clean_run()
    run.send("seen", "info")
    run.poll("seen", 0, 5)
    assert check(run.ops, {0: reads([f"v{i}" for i in range(5)] + ["seen"])}).valid
    result = check(run.ops, {0: reads([f"v{i}" for i in range(5)])})
    assert found(result) == {checker.READ_VANISHED}
    # replaced by another record at the same offset is vanishing too
    run.send("other", "info")
    result = check(run.ops, {0: reads([f"v{i}" for i in range(5)] + ["other"])})
    assert found(result) == {checker.READ_VANISHED}
    assert result.anomalies[checker.READ_VANISHED][0]["final"] == "other"


def test_a_reader_seeing_a_value_never_sent() -> None:
    run = clean_run()
    run.poll("ghost", 0, 2)
    assert found(check(run.ops, {0: reads([f"v{i}" for i in range(5)])})) == {
        checker.UNEXPECTED, checker.READ_VANISHED}


def test_acknowledged_while_the_isr_was_below_min_insync() -> None:
    config = CheckConfig(min_insync_replicas=2)
    run = Run()
    run.state(leader=2, isr=[1, 2, 3], version=0)
    run.send("a", offset=0)
    run.state(leader=1, isr=[1], version=1, epoch=1)
    run.send("b", offset=1)    # the leader's epoch began with ISR {1}: acks=all must refuse
    run.state(leader=1, isr=[1, 2], version=2, epoch=1)
    run.send("c", offset=2)
    result = check(run.ops, {0: reads(["a", "b", "c"])}, config=config)
    assert found(result) == {checker.BELOW_MIN_ISR}
    assert [e["value"] for e in result.anomalies[checker.BELOW_MIN_ISR]] == ["b"]
    # with min.insync.replicas=1 the same history is fine
    assert check(run.ops, {0: reads(["a", "b", "c"])}).valid


def test_a_store_isr_shrunk_behind_the_leader_is_not_judged_below_min_insync() -> None:
    """The controller shrank the store's ISR within the leader's epoch; a leader cut off from
    the store may still count the removed follower (and wait for it), as Kafka's does."""
    config = CheckConfig(min_insync_replicas=2)
    run = Run()
    run.state(leader=1, isr=[1, 2], version=0, epoch=3)
    run.state(leader=1, isr=[1], version=1, epoch=3)
    run.send("a", offset=0)
    assert check(run.ops, {0: reads(["a"])}, config=config).valid
    # a missed state (version gap) leaves nothing to judge either
    gap = Run()
    gap.state(leader=1, isr=[1], version=0, epoch=3)
    gap.state(leader=1, isr=[1], version=5, epoch=4)
    gap.send("a", offset=0)
    assert check(gap.ops, {0: reads(["a"])}, config=config).valid


def test_a_witnessed_ack_is_judged_by_the_replicas_that_held_the_record() -> None:
    config = CheckConfig(min_insync_replicas=2)
    run = Run()
    run.state(leader=1, isr=[1, 2, 3], version=0)
    run.state(leader=1, isr=[1], version=1, epoch=1)   # the store's ISR: below min all along
    run.send("held-by-two", offset=0, witness={"holders": [1, 2], "leader_isr": [1, 2]})
    run.send("leader-only", offset=1, witness={"holders": [1], "leader_isr": [1, 2]})
    run.send("isr-member-lacks", offset=2,
             witness={"holders": [1, 2], "leader_isr": [1, 2, 3]})
    run.send("small-leader-isr", offset=3, witness={"holders": [1, 2], "leader_isr": [1]})
    result = check(run.ops, {0: reads(["held-by-two", "leader-only", "isr-member-lacks",
                                        "small-leader-isr"])}, config=config)
    assert found(result) == {checker.BELOW_MIN_ISR}
    assert [e["value"] for e in result.anomalies[checker.BELOW_MIN_ISR]] == [
        "leader-only", "isr-member-lacks", "small-leader-isr"]


def test_an_ack_whose_isr_recovered_before_it_completed_is_fine() -> None:
    run = Run()
    run.state(leader=1, isr=[1], version=0)
    invoke = run.history.invoke("p0", "send", {"value": "a"})
    run.state(leader=1, isr=[1, 2], version=1)
    run.history.complete(invoke, "ok", {"partition": 0, "offset": 0})
    assert check(run.ops, {0: reads(["a"])}, config=CheckConfig(min_insync_replicas=2)).valid


def test_an_isr_written_before_the_ack_but_polled_after_it_counts() -> None:
    """The leader acknowledges once its own ISR expansion is written; the observer's poll
    sees the znode later (seen in the rolling-restart schedule: 0.4 s late under load).
    Judged by the znode's mtime, not by when the poll saw it."""
    def run_with(mtime_known: bool) -> Run:
        run = Run()
        run.state(leader=1, isr=[1, 2], version=0, epoch=0)
        run.state(leader=2, isr=[2], version=1, epoch=1)
        invoke = run.history.invoke("p0", "send", {"value": "a"})
        written = time.time()
        ack = run.history.complete(invoke, "ok", {"partition": 0, "offset": 0})
        while time.time() <= ack.wall:
            time.sleep(0.001)  # the poll sees the expansion after the ack
        run.state(leader=2, isr=[2, 1], version=2, epoch=1,
                  mtime=written if mtime_known else None)
        return run

    config = CheckConfig(min_insync_replicas=2)
    assert check(run_with(True).ops, {0: reads(["a"])}, config=config).valid
    # without the write time the same history is judged below min.insync.replicas
    result = check(run_with(False).ops, {0: reads(["a"])}, config=config)
    assert found(result) == {checker.BELOW_MIN_ISR}


def test_an_ack_is_judged_by_the_isr_of_the_leader_epoch_that_appended_it() -> None:
    """Seen in the rolling-restart schedule: the controller moved leadership to broker 2 with
    ISR {2} while the old leader, 1, still took a producer's records and acknowledged them
    once 2 — not yet aware — had fetched them: on two replicas, as Kafka's old leader does.
    The batches' leader epoch (on disk) names the leader that acknowledged."""
    config = CheckConfig(min_insync_replicas=2)
    run = Run()
    run.state(leader=1, isr=[1, 2], version=0, epoch=0)
    run.state(leader=2, isr=[2], version=1, epoch=1)
    run.send("by-the-old-leader", offset=0)
    run.send("by-the-new-leader", offset=1)
    values = ["by-the-old-leader", "by-the-new-leader"]

    def copies(epochs: tuple[tuple[int, int], ...]) -> dict[int, dict[int, ReplicaLog]]:
        return {0: {b: dataclasses.replace(replica(b, values), epochs=epochs)
                    for b in (1, 2)}}

    result = check(run.ops, {0: reads(values)}, copies(((0, 0), (1, 1))), config)
    assert found(result) == {checker.BELOW_MIN_ISR}
    assert [e["value"] for e in result.anomalies[checker.BELOW_MIN_ISR]] == [
        "by-the-new-leader"]
    # both appended by epoch 0's leader: nothing below min.insync.replicas
    assert check(run.ops, {0: reads(values)}, copies(((0, 0),)), config).valid
    # without the epochs both acks are judged by the states around them
    assert check(run.ops, {0: reads(values)}, None, config).counts[
        checker.BELOW_MIN_ISR] == 2


def test_an_unclean_election() -> None:
    run = clean_run()
    run.state(leader=1, isr=[1, 2], version=3, epoch=4)
    run.state(leader=1, isr=[1], version=4, epoch=4)
    run.state(leader=2, isr=[2], version=5, epoch=5)   # 2 was not in the ISR {1}
    final = {0: reads([f"v{i}" for i in range(5)])}
    result = check(run.ops, final)
    assert found(result) == {checker.UNCLEAN}
    assert result.anomalies[checker.UNCLEAN][0]["previous_isr"] == [1]
    assert check(run.ops, final, config=CheckConfig(unclean_leader_election=True)).valid


@pytest.mark.parametrize("versions", [(3, 5), (3, 3)])
def test_an_election_after_missed_states_is_not_judged(versions: tuple[int, int]) -> None:
    run = clean_run()
    run.state(leader=1, isr=[1], version=versions[0], epoch=4)
    run.state(leader=2, isr=[2], version=versions[1], epoch=5)  # an ISR change may be missed
    assert check(run.ops, {0: reads([f"v{i}" for i in range(5)])}).valid


def test_a_clean_election_from_the_isr() -> None:
    run = clean_run()
    run.state(leader=1, isr=[1, 2, 3], version=0, epoch=0)
    run.state(leader=2, isr=[2, 3], version=1, epoch=1)
    run.state(leader=-1, isr=[2], version=2, epoch=2)   # no leader at all: not unclean
    run.state(leader=2, isr=[2], version=3, epoch=3)
    assert check(run.ops, {0: reads([f"v{i}" for i in range(5)])}).valid


def test_examples_are_capped_but_counts_are_complete() -> None:
    run = Run()
    for i in range(50):
        run.send(f"v{i}", offset=i)
    result = check(run.ops, {0: []}, config=CheckConfig(max_examples=3))
    assert result.counts[checker.LOST] == 50 and len(result.anomalies[checker.LOST]) == 3
    assert "lost=50" in result.summary()
