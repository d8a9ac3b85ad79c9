"""The controller at work in a real cluster: ZooKeeper and three broker processes.

These tests assert on leadership (Metadata from the brokers, the partition state znodes read
by another ZooKeeper session) and produce to the new leader of a fresh topic; where a
returning replica must rejoin the ISR (automatic rebalance) the brokers' replication does it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

from confluent_kafka import ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.client.conn import Connection
from strom.metadata.changes import SetPartitions
from strom.metadata.image import MetadataImage
from strom.metadata.zookeeper import ZooKeeperMetadataStore
from strom.protocol import api
from strom.protocol import controlled_shutdown as cs
from strom.protocol.versions import ApiKey
from strom.testing.broker import EmbeddedBroker
from strom.testing.pytest_plugin import BrokerFactory
from tests.controller.cluster import (
    FAILOVER_S,
    IDS,
    create,
    leader_seen_by,
    on_two_brokers,
    partition,
    start_cluster,
    wait_for,
)
from tests.metadata.zk_helpers import wait_until


def test_a_killed_leader_is_replaced_from_the_isr_with_a_higher_epoch(
        cluster: dict[int, EmbeddedBroker], observer: ZooKeeperMetadataStore) -> None:
    controller = observer.image.controller_id
    dead, heir, other = [n for n in IDS if n != controller] + [controller]
    create(cluster, observer, "failover", [[dead, heir, other]])
    before = wait_for(observer, "failover", lambda p: p.leader == dead, "the first leader")
    assert before.isr == (dead, heir, other)

    started = time.monotonic()
    cluster[dead].kill()
    after = wait_for(observer, "failover", lambda p: p.leader != dead, "a new leader")
    assert time.monotonic() - started < FAILOVER_S
    assert (after.leader, after.isr) == (heir, (heir, other))
    assert after.leader_epoch == before.leader_epoch + 1
    wait_until(lambda: leader_seen_by(cluster[other], "failover") == heir,
               what="Metadata naming the new leader")

    # the new leader takes writes (acks=1: nothing depends on followers replicating)
    producer = Producer({"bootstrap.servers": cluster[other].bootstrap, "acks": 1})
    delivered: list[object] = []
    producer.produce("failover", b"after the failover",
                     on_delivery=lambda err, msg: delivered.append(err or msg.offset()))
    assert producer.flush(15) == 0 and delivered == [0]


def test_a_killed_controller_is_succeeded_and_the_successor_handles_failures(
        cluster: dict[int, EmbeddedBroker], observer: ZooKeeperMetadataStore) -> None:
    first = observer.image.controller_id
    survivors = [n for n in IDS if n != first]
    create(cluster, observer, "succession", [[survivors[0], survivors[1]]])
    wait_for(observer, "succession", lambda p: p.leader == survivors[0], "the first leader")

    cluster[first].kill()
    wait_until(lambda: observer.image.controller_id in survivors, timeout=FAILOVER_S,
               what="a new controller")
    successor = observer.image.controller_id
    cluster[survivors[0]].kill()
    after = wait_for(observer, "succession", lambda p: p.leader == survivors[1],
                     "the partition failed over by the new controller")
    assert after.isr == (survivors[1],) and after.leader_epoch == 1
    if successor == survivors[0]:  # it died too: the last broker took over
        wait_until(lambda: observer.image.controller_id == survivors[1])


def test_all_isr_members_dead_leaves_the_partition_offline_until_one_returns(
        cluster: dict[int, EmbeddedBroker], observer: ZooKeeperMetadataStore) -> None:
    controller = observer.image.controller_id
    a, b = [n for n in IDS if n != controller]
    create(cluster, observer, "offline", [[a, b]])
    wait_for(observer, "offline", lambda p: p.leader == a, "the first leader")
    wait_until(lambda: leader_seen_by(cluster[controller], "offline") == a,
               what="the controller's metadata holding the topic")
    cluster[b].kill()
    wait_for(observer, "offline", lambda p: p.isr == (a,), "the follower out of the ISR")
    cluster[a].kill()
    offline = wait_for(observer, "offline", lambda p: p.leader == -1, "the partition offline")
    assert offline.isr == (a,) and offline.leader_epoch == 1
    admin = AdminClient({"bootstrap.servers": cluster[controller].bootstrap})
    meta = admin.list_topics("offline", timeout=10).topics["offline"].partitions[0]
    assert meta.leader == -1 and meta.error is not None and meta.error.code() == 5  # LNA
    cluster[b].start()  # out of sync: no leader (unclean election is off)
    wait_until(lambda: b in observer.image.brokers)
    time.sleep(1.0)
    assert partition(observer, "offline") == offline
    cluster[a].start()
    back = wait_for(observer, "offline", lambda p: p.leader == a, "the ISR member back")
    assert back.leader_epoch == 2


def test_a_clean_stop_moves_leadership_before_the_process_exits(
        cluster: dict[int, EmbeddedBroker], observer: ZooKeeperMetadataStore) -> None:
    controller = observer.image.controller_id
    leaving, heir = [n for n in IDS if n != controller]
    create(cluster, observer, "graceful", [[leaving, heir], [heir, leaving]])
    wait_for(observer, "graceful", lambda p: p.leader == leaving, "the first leader")
    # the controller must know the partitions before the broker asks it to move them (a
    # request arriving first is answered "nothing remains", and the move follows the exit)
    wait_until(lambda: leader_seen_by(cluster[controller], "graceful") == leaving,
               what="the controller's metadata naming the leaving leader")
    images: list[MetadataImage] = []
    observer.subscribe(images.append)

    assert cluster[leaving].stop() == 0
    wait_until(lambda: leaving not in observer.image.brokers)
    moved = [i for i in images if i.topics["graceful"].partitions[0].leader == heir]
    assert moved, "leadership never moved"
    assert leaving in moved[0].brokers, "leadership moved only after the broker had gone"
    first, second = moved[0].topics["graceful"].partitions
    assert (first.leader, first.leader_epoch, first.isr) == (heir, 1, (heir,))
    assert (second.leader, second.leader_epoch, second.isr) == (heir, 0, (heir,))


def test_elect_leaders_restores_the_preferred_leader(
        cluster: dict[int, EmbeddedBroker], observer: ZooKeeperMetadataStore) -> None:
    preferred, other = [n for n in IDS if n != observer.image.controller_id]
    admin = create(cluster, observer, "preferred", [[preferred, other], [preferred, other]])
    p0 = wait_for(observer, "preferred", lambda p: p.leader == preferred, "the first leader")
    # leadership moved away while the preferred replica stays in sync (as after a restart
    # once it has caught up); written as another controller would
    image = observer.image
    observer.write(image.epoch, [SetPartitions("preferred", (dataclasses.replace(
        p0, leader=other, leader_epoch=p0.leader_epoch + 1),))])
    # the controller answers from its own image (ELECTION_NOT_NEEDED while it has not read
    # the move: as Kafka's ZooKeeper-mode controller answers from its context)
    controller = cluster[observer.image.controller_id]
    wait_until(lambda: leader_seen_by(cluster[other], "preferred") == other
               and leader_seen_by(controller, "preferred") == other)

    results = admin.elect_leaders(ElectionType.PREFERRED, [
        TopicPartition("preferred", 0), TopicPartition("preferred", 1),
        TopicPartition("preferred", 7)]).result(15)
    errors = {tp.partition: (e.code() if e is not None else None) for tp, e in results.items()}
    assert errors == {0: None, 1: 84, 7: 3}  # ELECTION_NOT_NEEDED, UNKNOWN_TOPIC_OR_PARTITION
    # (the answer follows the write; the observer's session sees it by a watch, a moment later)
    after = wait_for(observer, "preferred", lambda p: p.leader == preferred, "the election")
    assert after.leader_epoch == 2


def test_topics_created_and_deleted_through_any_broker_span_the_cluster(
        cluster: dict[int, EmbeddedBroker], observer: ZooKeeperMetadataStore) -> None:
    admin = AdminClient({"bootstrap.servers": cluster[IDS[0]].bootstrap})
    admin.create_topics([NewTopic("spread", 3, 3)])["spread"].result(15)
    wait_until(lambda: "spread" in observer.image.topics)
    parts = observer.image.topics["spread"].partitions
    assert {p.leader for p in parts} == set(IDS)  # leadership spread over the live brokers
    assert all(p.leader == p.replicas[0] and p.isr == p.replicas and sorted(p.replicas)
               == list(IDS) and p.leader_epoch == 0 for p in parts)
    wait_until(lambda: all((b.data_dir / f"spread-{i}").is_dir()
                           for b in cluster.values() for i in range(3)),
               what="every replica's log on every broker")
    admin.delete_topics(["spread"])["spread"].result(15)
    wait_until(lambda: not any(any(b.data_dir.glob("spread-*")) for b in cluster.values()),
               what="the logs gone from every broker")


def test_only_the_controller_answers_controlled_shutdown_and_elect_leaders(
        cluster: dict[int, EmbeddedBroker], observer: ZooKeeperMetadataStore) -> None:
    other = next(n for n in IDS if n != observer.image.controller_id)

    async def ask(broker: EmbeddedBroker) -> tuple[int, int]:
        conn = await Connection(broker.host, broker.port).open()
        try:
            raw = await conn.send(ApiKey.CONTROLLED_SHUTDOWN, 3, cs.encode_request(
                cs.ControlledShutdownRequest(99), 3))
            assert raw is not None
            elect = await conn.send(ApiKey.ELECT_LEADERS, 2, api.request(
                ApiKey.ELECT_LEADERS, 2, {"election_type": 0, "topic_partitions": None,
                                          "timeout_ms": 1000}))
            assert elect is not None
            return (cs.decode_response(raw, 3).error_code,
                    api.decode_response(ApiKey.ELECT_LEADERS, 2, elect).error_code)
        finally:
            await conn.close()

    assert asyncio.run(ask(cluster[other])) == (41, 41)  # NOT_CONTROLLER
    # the controller: broker 99 is not registered (BROKER_NOT_AVAILABLE); nothing to elect
    assert asyncio.run(ask(cluster[observer.image.controller_id])) == (8, 0)


def test_controlled_shutdown_with_an_old_broker_epoch_is_stale(
        cluster: dict[int, EmbeddedBroker], observer: ZooKeeperMetadataStore) -> None:
    controller = observer.image.controller_id
    restarted, other = [n for n in IDS if n != controller]
    old_epoch = observer.image.brokers[restarted].epoch
    cluster[restarted].kill()
    wait_until(lambda: restarted not in observer.image.brokers)
    cluster[restarted].start()
    wait_until(lambda: restarted in observer.image.brokers)
    new_epoch = observer.image.brokers[restarted].epoch
    assert new_epoch > old_epoch  # the new registration's czxid
    create(cluster, observer, "epochs", [[restarted, other]])
    wait_for(observer, "epochs", lambda p: p.leader == restarted, "the first leader")

    async def shut_down(epoch: int) -> tuple[int, int]:
        broker = cluster[controller]
        conn = await Connection(broker.host, broker.port).open()
        try:
            raw = await conn.send(ApiKey.CONTROLLED_SHUTDOWN, 3, cs.encode_request(
                cs.ControlledShutdownRequest(restarted, epoch), 3))
            assert raw is not None
            answer = cs.decode_response(raw, 3)
            return answer.error_code, len(answer.remaining_partitions)
        finally:
            await conn.close()

    # a request from the broker's previous life must not move the new one's leadership
    assert asyncio.run(shut_down(old_epoch)) == (77, 0)  # STALE_BROKER_EPOCH
    time.sleep(0.5)
    still = partition(observer, "epochs")
    assert still is not None and (still.leader, still.leader_epoch) == (restarted, 0)
    assert asyncio.run(shut_down(new_epoch)) == (0, 0)
    moved = wait_for(observer, "epochs", lambda p: p.leader == other, "leadership moved")
    assert moved.leader_epoch == 1


def test_leadership_returns_to_the_preferred_replica_automatically(
        zookeeper_connect: str, strom_broker_factory: BrokerFactory,
        observer: ZooKeeperMetadataStore) -> None:
    brokers = start_cluster(zookeeper_connect, strom_broker_factory, observer, {
        "auto.leader.rebalance.enable": "true", "leader.imbalance.check.interval.seconds": 1})
    controller, preferred, other = on_two_brokers(brokers, observer, "rebalance")
    brokers[preferred].kill()
    failed_over = wait_for(observer, "rebalance", lambda p: p.leader == other, "a failover")
    brokers[preferred].start()
    # it catches up, the leader takes it back into the ISR, and the next imbalance check
    # hands it the leadership
    back = wait_for(observer, "rebalance", lambda p: p.leader == preferred,
                    "the preferred leader back")
    assert back.leader_epoch == failed_over.leader_epoch + 1
    assert sorted(back.isr) == sorted((other, preferred))
    wait_until(lambda: leader_seen_by(brokers[controller], "rebalance") == preferred,
               what="Metadata naming the preferred leader")


def test_unclean_election_follows_the_topic_config(
        cluster: dict[int, EmbeddedBroker], observer: ZooKeeperMetadataStore) -> None:
    controller = observer.image.controller_id
    last, stale = [n for n in IDS if n != controller]
    admin = create(cluster, observer, "unclean", [[last, stale]],
                   {"unclean.leader.election.enable": "true"})
    create(cluster, observer, "clean", [[last, stale]])
    for name in ("unclean", "clean"):
        wait_for(observer, name, lambda p: p.leader == last, "the first leader")
    cluster[stale].kill()
    for name in ("unclean", "clean"):
        wait_for(observer, name, lambda p: p.isr == (last,), "the follower out of the ISR")
    cluster[last].kill()
    for name in ("unclean", "clean"):
        wait_for(observer, name, lambda p: p.leader == -1, "the partition offline")
    cluster[stale].start()  # out of sync
    # allowed for the topic: the out-of-sync replica leads, alone in the ISR
    taken = wait_for(observer, "unclean", lambda p: p.leader == stale, "an unclean election")
    assert (taken.isr, taken.leader_epoch) == ((stale,), 2)
    time.sleep(1.0)
    clean = partition(observer, "clean")
    assert clean is not None and (clean.leader, clean.isr) == (-1, (last,))
    # not allowed for the topic, but asked for by an admin (ElectLeaders, UNCLEAN)
    results = admin.elect_leaders(ElectionType.UNCLEAN, [TopicPartition("clean", 0)]).result(15)
    assert list(results.values()) == [None]
    forced = wait_for(observer, "clean", lambda p: p.leader == stale, "the forced election")
    assert (forced.isr, forced.leader_epoch) == ((stale,), 2)
