"""Issue 22 on a real 3-broker cluster with confluent-kafka: a topic deleted and created again
is a new topic on every replica, also when a broker was SIGSTOPped or killed -9 through the
delete; a topic created with configs and produced to at once runs with them on every replica.

Before the fix (topic ids not stored with logs; an auto-create racing the creation prepared a
log with default settings that the topic then adopted) these failed: in a delete / recreate
loop without any fault, 5 of 6 rounds held records of earlier rounds (end offsets 2000, 3000,
... where 1000 were written); of 20 compacted topics produced to at once, a partition-0
replica on a broker other than the controller ran with the broker defaults (it accepted a
keyless record and never rolled at segment.bytes). The default run keeps one pause loop, one
kill loop and the config loop (about 2½ minutes); ``pytest -m faults`` adds longer loops.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from strom.testing.chaos.generations import (
    ConfigRoundsConfig,
    RecreateConfig,
    run_config_rounds,
    run_create_race_rounds,
    run_recreate_rounds,
)
from strom.testing.cluster import EmbeddedCluster
from strom.testing.zookeeper import zookeeper_available

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed"),
]

#: a paused broker leaves the ISR after 3 s instead of holding acks=all for 30 s.
CLUSTER_CONFIGS = {"replica.lag.time.max.ms": 3000}


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(3, configs=CLUSTER_CONFIGS) as running:
        yield running


def test_a_broker_paused_through_the_delete_never_keeps_the_old_topic(
        cluster: EmbeddedCluster) -> None:
    result = run_recreate_rounds(cluster, RecreateConfig(
        topic="paused", rounds=4, fault="pause", seed=1))
    assert not result.problems, result.summary() + "\n" + "\n".join(result.problems)
    assert result.rounds_with_old_data == 0
    assert all(r.victim is not None for r in result.rounds[:-1])
    # every round was a new topic
    assert len({r.topic_id for r in result.rounds}) == len(result.rounds)


def test_a_broker_killed_through_the_delete_drops_the_old_log_when_it_returns(
        cluster: EmbeddedCluster) -> None:
    result = run_recreate_rounds(cluster, RecreateConfig(
        topic="killed", rounds=3, fault="kill", seed=2))
    assert not result.problems, result.summary() + "\n" + "\n".join(result.problems)
    assert result.rounds_with_old_data == 0


def test_a_topic_produced_to_at_once_runs_with_its_configs_on_every_replica(
        cluster: EmbeddedCluster) -> None:
    result = run_config_rounds(cluster, ConfigRoundsConfig(topics=20))
    assert result.valid, result.summary() + "\n" + "\n".join(
        result.wrong_replicas + result.wrong_described + result.problems)
    assert result.replicas == 20 * 3 * 3


def test_an_auto_create_racing_create_topics_ends_with_one_topic_and_its_configs(
        cluster: EmbeddedCluster) -> None:
    result = run_create_race_rounds(cluster, rounds=10)
    # which side wins depends on timing (2-3 of 8 CreateTopics won on a loaded machine)
    split = f"CreateTopics won {result.explicit_won} of 10; auto-creates: {result.auto_answers}"
    assert result.valid, (split, result.problems, result.configs.summary(),
                          result.configs.wrong_replicas)
    assert sum(result.auto_answers.values()) == 10 * 2


@pytest.mark.faults_extended
@pytest.mark.parametrize("fault", ["none", "pause", "kill"])
def test_sixteen_rounds_of_delete_and_recreate(cluster: EmbeddedCluster, fault: str) -> None:
    result = run_recreate_rounds(cluster, RecreateConfig(
        topic=f"long-{fault}", rounds=16, fault=fault, seed=3))
    assert not result.problems, result.summary() + "\n" + "\n".join(result.problems)


@pytest.mark.faults_extended
def test_fifty_topics_produced_to_at_once(cluster: EmbeddedCluster) -> None:
    result = run_config_rounds(cluster, ConfigRoundsConfig(topic_prefix="many", topics=50))
    assert result.valid, result.summary()
