"""Replica logs read from a stopped broker's data directory with strom's own reader, and a
log tail cut off on purpose."""

from __future__ import annotations

from confluent_kafka import KafkaError, Producer

from strom.testing.chaos.replicas import read_replica, read_replicas, truncate_replica
from strom.testing.chaos.workload import create_topic, read_all
from strom.testing.pytest_plugin import BrokerFactory


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    # small batches, so that a segment of 2 KiB holds several
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 0, "batch.num.messages": 20})
    for value in values:
        producer.produce(topic, value.encode(), partition=0, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(15) == 0 and errors == []


def test_a_replica_log_is_what_consumers_read(strom_broker_factory: BrokerFactory) -> None:
    broker = strom_broker_factory({"log.segment.bytes": 2048})   # several segments
    create_topic(broker.bootstrap, "rl", 2, 1)
    values = [f"value-{i:04d}" for i in range(300)]
    produce(broker.bootstrap, "rl", values)
    final = read_all(broker.bootstrap, "rl", [0, 1])
    assert broker.stop() == 0

    copy = read_replica(7, broker.data_dir, "rl", 0)
    assert (copy.broker, copy.log_start, copy.log_end, copy.problem) == (7, 0, 300, None)
    assert [r.value for r in copy.records] == values
    assert copy.records == tuple(final[0])
    assert copy.high_watermark in (None, 300)
    # one leader epoch (0) for every batch: who appended each offset
    assert copy.epochs == ((0, 0),)
    assert (copy.leader_epoch_at(0), copy.leader_epoch_at(299), copy.leader_epoch_at(300)) \
        == (0, 0, None)
    assert len(list((broker.data_dir / "rl-0").glob("*.log"))) > 1
    assert read_replicas({7: broker.data_dir}, "rl", [0, 1, 2]) == {
        0: {7: copy}, 1: {7: read_replica(7, broker.data_dir, "rl", 1)}, 2: {}}


def test_a_cut_tail_is_gone_after_a_restart(strom_broker_factory: BrokerFactory) -> None:
    broker = strom_broker_factory({"log.segment.bytes": 2048})
    create_topic(broker.bootstrap, "cut", 1, 1)
    values = [f"value-{i:04d}" for i in range(200)]
    produce(broker.bootstrap, "cut", values)
    broker.kill()
    end = truncate_replica(broker.data_dir, "cut", 0, keep=120)
    assert end <= 120
    assert read_replica(0, broker.data_dir, "cut", 0).log_end == end
    broker.start()
    assert [r.value for r in read_all(broker.bootstrap, "cut", [0])[0]] == values[:end]
