"""cluster_probe: waiting on ZooKeeper's view of the cluster."""

from __future__ import annotations

import pytest

from strom.cli import cluster_probe


def test_wait_unregistered_tries_again_when_zookeeper_is_slow_to_answer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    answers: list[set[int] | TimeoutError] = [
        TimeoutError("ZooKeeper at z did not answer in 5s"), {1}, set()]

    def registered(connect: str, timeout: float = 5.0) -> set[int]:
        answer = answers.pop(0)
        if isinstance(answer, TimeoutError):
            raise answer
        return answer

    monkeypatch.setattr(cluster_probe, "registered_brokers", registered)
    cluster_probe.wait_unregistered("z", 1, timeout=10.0)
    assert answers == []


def test_wait_unregistered_gives_up_at_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    def silent(connect: str, timeout: float = 5.0) -> set[int]:
        raise TimeoutError("ZooKeeper at z did not answer in 5s")

    monkeypatch.setattr(cluster_probe, "registered_brokers", silent)
    with pytest.raises(TimeoutError, match="did not answer"):
        cluster_probe.wait_unregistered("z", 1, timeout=0.0)
