"""Topic generations (issue 22): a topic deleted and created again under its name must be a
new topic on every replica, and a new topic's configs must hold on every replica.

:func:`run_recreate_rounds` — the delete / recreate loop. Each round creates the topic
(RF ``replication_factor``), writes ``records`` records to each partition with an idempotent
``acks=all`` confluent-kafka producer (values ``g<round>-p<partition>-<n>``), waits until
every replica's log — read from the broker's data directory
(:mod:`strom.testing.chaos.replicas`) — holds exactly those records at offsets
``0..records-1``, and checks: the partition's end offset (a consumer's watermarks), each
replica's records (no record of an earlier round, none missing, none extra) and each
replica's ``partition.metadata`` topic id (the one ZooKeeper holds); then deletes the topic
and waits until ZooKeeper and every running broker's Metadata no longer have it. With
``fault``, a broker that is not the controller (seeded choice) is, through the delete:

* ``"pause"`` — SIGSTOPped before the DeleteTopics and SIGCONTed right after the next
  round's CreateTopics answered: it never sees an image without the topic, only the old
  topic's log and then a topic of the same name with another id;
* ``"kill"`` — killed -9 before the DeleteTopics and started again after the next round's
  records were acknowledged: it comes back with the old topic's log on disk.

:func:`run_config_rounds` — create-then-produce-at-once. Each round creates a topic with
``configs`` (by default ``cleanup.policy=compact`` and a small ``segment.bytes``) and at
once produces keyed records with a confluent-kafka producer left at its defaults (so its
Metadata requests may auto-create the topic on a broker that has not seen it yet) — in
flushes of :data:`CHUNK` records, so batches stay below ``segment.bytes`` (a larger one is
refused, RECORD_LIST_TOO_LARGE) while the partition grows past it —, then one keyless record
per partition, which a compacted topic's leader must refuse
(INVALID_RECORD). After the rounds it checks every replica: DescribeConfigs asked of each
broker reports the topic's configs, and each replica's log ran with them — its segments
rolled at ``segment.bytes`` (a segment larger than that holds a single batch; a replica
running with the broker default of 1 GiB keeps everything in one segment).

:func:`run_create_race_rounds` — an auto-create racing an explicit CreateTopics: at the
same moment, CreateTopics with configs to the controller and Metadata requests allowing
auto-creation of the same name to every other broker. One topic results: the CreateTopics'
(its configs on every replica) or the auto-create's (defaults, and TOPIC_ALREADY_EXISTS for
the CreateTopics, as Kafka answers the loser); an auto-create is never answered
TOPIC_ALREADY_EXISTS (it gets the topic that won, or LEADER_NOT_AVAILABLE).

Results list every problem found, with the figures the issue reports (rounds with old data,
replicas with wrong configs). Real processes, real clients; the cluster is the caller's
(:class:`strom.testing.cluster.EmbeddedCluster`, ``replica.lag.time.max.ms`` of a few
seconds keeps a paused broker from holding acks=all for 30 s).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from strom.client.conn import Connection
from strom.common.errors import error_name
from strom.common.types import kafka_uuid
from strom.protocol.versions import ApiKey
from strom.storage.dump import dump_segment
from strom.testing.chaos.cluster import Cluster
from strom.testing.chaos.history import History
from strom.testing.chaos.nemesis import Nemesis
from strom.testing.chaos.replicas import partition_dir, read_replica, segment_files
from strom.testing.chaos.workload import FAST_RECONNECT, LIBRDKAFKA_LOG
from strom.testing.chaos.zkview import ZooKeeperView

FAULTS = ("none", "pause", "kill")
#: The configs :func:`run_config_rounds` creates its topics with.
COMPACT_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "2048"}
TOPIC_RESOURCE = 2  # DescribeConfigs resource type TOPIC
#: keyed records per flush in :func:`run_config_rounds` (a batch of about 600 bytes).
CHUNK = 10
#: how long the racing auto-creates wait after the CreateTopics is sent, round by round:
#: either side may win (the auto-creates' requests are faster than the admin client's).
RACE_DELAYS = (0.0, 0.01, 0.03, 0.1, 0.3)


@dataclass(frozen=True)
class RecreateConfig:
    topic: str = "generations"
    partitions: int = 3
    replication_factor: int = 3
    records: int = 1000
    rounds: int = 4
    fault: str = "none"
    seed: int = 0
    #: how long a round may take to replicate its records to every replica.
    settle_timeout: float = 60.0


@dataclass
class RoundResult:
    round: int
    topic_id: str | None
    #: partition → end offset (high watermark) a consumer saw.
    end_offsets: dict[int, int] = field(default_factory=dict)
    #: records of earlier rounds found in any replica.
    old_records: int = 0
    #: the broker paused or killed through this round's delete (None: no fault).
    victim: int | None = None
    problems: list[str] = field(default_factory=list)


@dataclass
class RecreateResult:
    config: RecreateConfig
    rounds: list[RoundResult]

    @property
    def problems(self) -> list[str]:
        return [f"round {r.round}: {p}" for r in self.rounds for p in r.problems]

    @property
    def rounds_with_old_data(self) -> int:
        return sum(1 for r in self.rounds if r.old_records or any(
            end != self.config.records for end in r.end_offsets.values()))

    def summary(self) -> str:
        return (f"{len(self.rounds)} rounds (fault {self.config.fault}): "
                f"{self.rounds_with_old_data} with old data, {len(self.problems)} problems")


def run_recreate_rounds(cluster: Cluster, config: RecreateConfig | None = None
                        ) -> RecreateResult:
    """The delete / recreate loop; see the module doc."""
    config = config or RecreateConfig()
    if config.fault not in FAULTS:
        raise ValueError(f"fault {config.fault!r} is none of {FAULTS}")
    rng = random.Random(config.seed)
    nemesis = Nemesis(cluster, History(), seed=config.seed)
    admin = _admin(cluster.bootstrap)
    results: list[RoundResult] = []
    victim: int | None = None
    try:
        for number in range(config.rounds):
            _create(admin, nemesis.view, config.topic, config.partitions,
                    config.replication_factor, {})
            result = RoundResult(number, nemesis.view.topic_id(config.topic))
            results.append(result)
            if victim is not None and config.fault == "pause":
                nemesis.resume(victim)  # it never saw the topic gone
            result.problems += _produce_round(cluster.bootstrap, config, number)
            if victim is not None and config.fault == "kill":
                nemesis.start(victim)  # back with the old topic's log on disk
            victim = None
            _check_round(cluster, config, result)
            if number == config.rounds - 1:
                break
            if config.fault != "none":
                controller = cluster.controller_id()
                victim = rng.choice(sorted(b for b in cluster.brokers if b != controller))
                result.victim = victim
                if config.fault == "pause":
                    nemesis.pause(victim)
                else:
                    nemesis.kill(victim)
            _delete(admin, nemesis.view, cluster, config.topic, victim)
    finally:
        nemesis.heal_all()
        nemesis.close()
    return RecreateResult(config, results)


def _create(admin: AdminClient, view: ZooKeeperView, topic: str, partitions: int,
            replication_factor: int, configs: Mapping[str, str], timeout: float = 30.0
            ) -> None:
    """CreateTopics (retried while the controller still holds the deleted topic), then wait
    until every partition has a leader."""
    deadline = time.monotonic() + timeout
    while True:
        future = admin.create_topics([NewTopic(topic, partitions, replication_factor,
                                               config=dict(configs))])[topic]
        try:
            future.result(timeout)
            break
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() != KafkaError.TOPIC_ALREADY_EXISTS or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    view.wait_for(f"leaders of {topic}", lambda: all(
        (state := view.partition_state(topic, p)) is not None and int(str(state["leader"])) >= 0
        for p in range(partitions)), timeout)


def _produce_round(bootstrap: str, config: RecreateConfig, number: int) -> list[str]:
    """Write the round's records; the delivery errors, if any, as problems."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5, "message.timeout.ms": 60000,
                         **FAST_RECONNECT})
    errors: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for partition in range(config.partitions):
        for n in range(config.records):
            value = f"g{number}-p{partition}-{n}".encode()
            while True:
                try:
                    producer.produce(config.topic, value=value, partition=partition,
                                     on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
    left = producer.flush(90)
    problems = [f"{len(errors)} records not delivered (first: {errors[0]})"] if errors else []
    if left:
        problems.append(f"{left} records still undelivered after 90 s")
    return problems


def _expected(config: RecreateConfig, number: int, partition: int) -> list[tuple[int, str]]:
    return [(n, f"g{number}-p{partition}-{n}") for n in range(config.records)]


def _check_round(cluster: Cluster, config: RecreateConfig, result: RoundResult) -> None:
    """End offsets, then every replica's records and topic id once replication settled."""
    result.end_offsets = _end_offsets(cluster.bootstrap, config.topic, config.partitions)
    for partition, end in sorted(result.end_offsets.items()):
        if end != config.records:
            result.problems.append(f"partition {partition} ends at {end}, "
                                   f"not {config.records}")
    deadline = time.monotonic() + config.settle_timeout
    while True:
        problems, old = _replica_problems(cluster, config, result)
        if not problems or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    result.old_records = old
    result.problems += problems


def _replica_problems(cluster: Cluster, config: RecreateConfig, result: RoundResult
                      ) -> tuple[list[str], int]:
    problems: list[str] = []
    old = 0
    prefix = f"g{result.round}-"
    for partition in range(config.partitions):
        expected = _expected(config, result.round, partition)
        holders = 0
        for node, broker in sorted(cluster.brokers.items()):
            if not partition_dir(broker.data_dir, config.topic, partition).is_dir():
                continue
            holders += 1
            replica = read_replica(node, broker.data_dir, config.topic, partition)
            got = [(r.offset, r.value) for r in replica.records]
            stale = sum(1 for _, value in got if not value.startswith(prefix))
            old += stale
            if got != expected:
                problems.append(
                    f"broker {node}'s copy of partition {partition} holds {len(got)} records "
                    f"({stale} of earlier rounds), not the round's {len(expected)}")
            if replica.topic_id != result.topic_id:
                problems.append(f"broker {node}'s copy of partition {partition} names topic "
                                f"id {replica.topic_id}, not {result.topic_id}")
        if holders != config.replication_factor:
            problems.append(f"partition {partition} has {holders} replicas on disk, not "
                            f"{config.replication_factor}")
    return problems, old


def _end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "generations-check",
                         "enable.auto.commit": False, "logger": LIBRDKAFKA_LOG})
    try:
        return {p: int(consumer.get_watermark_offsets(KafkaTopicPartition(topic, p),
                                                      timeout=30)[1])
                for p in range(partitions)}
    finally:
        consumer.close()


def _delete(admin: AdminClient, view: ZooKeeperView, cluster: Cluster, topic: str,
            stopped: int | None, timeout: float = 30.0) -> None:
    """DeleteTopics, then wait until ZooKeeper and every running broker (all but
    ``stopped``) no longer have the topic — what a client sees as the deletion done."""
    admin.delete_topics([topic])[topic].result(timeout)
    view.wait_for(f"{topic} gone from ZooKeeper", lambda: view.topic_id(topic) is None,
                  timeout)
    for node, broker in sorted(cluster.brokers.items()):
        if node != stopped:
            view.wait_for(f"{topic} gone from broker {node}'s Metadata",
                          partial(_unknown_to, broker.bootstrap, topic), timeout)


def _unknown_to(address: str, topic: str) -> bool:
    return broker_view(address, topic).topic_id is None


def _admin(bootstrap: str) -> AdminClient:
    settings: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": LIBRDKAFKA_LOG}
    return AdminClient(settings)


# -- what one broker says about a topic -------------------------------------------------------

@dataclass(frozen=True)
class BrokerTopicView:
    """A topic as one broker's Metadata and DescribeConfigs answer (None / {}: unknown);
    ``error_code`` the Metadata answer's for the topic."""

    topic_id: str | None
    configs: dict[str, str]
    error_code: int = 0


def broker_view(address: str, topic: str, *, configs: bool = False, auto_create: bool = False,
                timeout: float = 5.0) -> BrokerTopicView:
    """Ask the broker at ``address`` (and no other) about ``topic``: Metadata (allowing
    auto-creation with ``auto_create``) and, with ``configs``, DescribeConfigs."""

    async def ask() -> BrokerTopicView:
        host, _, port = address.rpartition(":")
        conn = Connection(host, int(port), client_id="generations-check",
                          request_timeout_s=timeout)
        await conn.open()
        try:
            metadata = await conn.request(ApiKey.METADATA, {
                "topics": [{"name": topic}], "allow_auto_topic_creation": auto_create})
            [entry] = metadata.topics
            topic_id = kafka_uuid(entry.topic_id) if entry.error_code == 0 else None
            found: dict[str, str] = {}
            if configs and topic_id is not None:
                described = await conn.request(ApiKey.DESCRIBE_CONFIGS, {
                    "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": topic,
                                   "configuration_keys": None}]})
                for resource in described.results:
                    found.update((c.name, c.value) for c in resource.configs)
            return BrokerTopicView(topic_id, found, entry.error_code)
        finally:
            await conn.close()

    return asyncio.run(ask())


# -- create, then produce at once -------------------------------------------------------------

@dataclass(frozen=True)
class ConfigRoundsConfig:
    topic_prefix: str = "configs"
    topics: int = 20
    partitions: int = 3
    replication_factor: int = 3
    records: int = 100  # keyed records per partition
    configs: Mapping[str, str] = field(default_factory=lambda: dict(COMPACT_CONFIGS))
    settle_timeout: float = 30.0


@dataclass
class ConfigRoundsResult:
    config: ConfigRoundsConfig
    replicas: int = 0
    #: "<topic>-<p> on broker <b>" whose log did not run with the topic's configs.
    wrong_replicas: list[str] = field(default_factory=list)
    #: keyless records a compacted topic's leader accepted.
    keyless_accepted: int = 0
    #: brokers whose DescribeConfigs did not report the topic's configs.
    wrong_described: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{self.config.topics} topics: {len(self.wrong_replicas)} of {self.replicas} "
                f"replicas with wrong configs, {self.keyless_accepted} keyless records "
                f"accepted, {len(self.wrong_described)} wrong DescribeConfigs answers, "
                f"{len(self.problems)} other problems")

    @property
    def valid(self) -> bool:
        return not (self.wrong_replicas or self.keyless_accepted or self.wrong_described
                    or self.problems)


def run_config_rounds(cluster: Cluster, config: ConfigRoundsConfig | None = None
                      ) -> ConfigRoundsResult:
    """Create-then-produce-at-once; see the module doc."""
    config = config or ConfigRoundsConfig()
    result = ConfigRoundsResult(config)
    admin = _admin(cluster.bootstrap)
    view = ZooKeeperView(cluster.zookeeper_connect)
    names = [f"{config.topic_prefix}-{i}" for i in range(config.topics)]
    try:
        for name in names:
            admin.create_topics([NewTopic(name, config.partitions, config.replication_factor,
                                          config=dict(config.configs))])[name].result(30)
            _produce_at_once(cluster.bootstrap, name, config, result)
        for name in names:
            _check_configs(cluster, view, name, config, result)
    finally:
        view.close()
    return result


def _produce_at_once(bootstrap: str, topic: str, config: ConfigRoundsConfig,
                     result: ConfigRoundsResult, *, keyless: bool = True) -> None:
    """Keyed records in flushes of :data:`CHUNK`; then, with ``keyless``, one record without
    a key per partition, counted in ``keyless_accepted`` when the leader took it."""
    producer = Producer({"bootstrap.servers": bootstrap, "logger": LIBRDKAFKA_LOG})
    errors: list[str] = []
    for first in range(0, config.records, CHUNK):
        for partition in range(config.partitions):
            for n in range(first, min(first + CHUNK, config.records)):
                producer.produce(topic, key=f"k{n}".encode(), value=b"v" * 50,
                                 partition=partition, on_delivery=lambda err, _m: errors.append(
                                     str(err)) if err else None)
        producer.flush(60)
    if producer.flush(60) or errors:
        result.problems.append(f"{topic}: keyed records not delivered: {errors[:1]}")
    if not keyless:
        return
    answers: list[Any] = []
    for partition in range(config.partitions):
        producer.produce(topic, value=b"keyless", partition=partition,
                         on_delivery=lambda err, _m: answers.append(err))
    producer.flush(60)
    result.keyless_accepted += sum(1 for err in answers if err is None)


def _check_configs(cluster: Cluster, view: ZooKeeperView, topic: str,
                   config: ConfigRoundsConfig, result: ConfigRoundsResult) -> None:
    """Each broker's DescribeConfigs reports ``config.configs`` for ``topic``, and each
    replica's log rolled at their ``segment.bytes``."""
    for node, broker in sorted(cluster.brokers.items()):
        described = broker_view(broker.bootstrap, topic, configs=True).configs
        wrong = {k: described.get(k) for k, v in config.configs.items() if described.get(k) != v}
        if wrong:
            result.wrong_described.append(f"{topic} on broker {node}: {wrong}")
    segment_bytes = int(config.configs.get("segment.bytes", "0"))
    for partition in range(config.partitions):
        state = view.partition_state(topic, partition)
        deadline = time.monotonic() + config.settle_timeout
        dirs = {node: partition_dir(broker.data_dir, topic, partition)
                for node, broker in cluster.brokers.items()}
        while True:  # followers may still be fetching: wait for equal log ends
            ends = {node: _log_end(d) for node, d in dirs.items() if d.is_dir()}
            if len(set(ends.values())) <= 1 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if len(ends) != config.replication_factor:
            result.problems.append(f"{topic}-{partition}: {len(ends)} replicas on disk "
                                   f"(state {state})")
        for node in sorted(ends):
            result.replicas += 1
            if segment_bytes and not _rolled_at(dirs[node], segment_bytes):
                result.wrong_replicas.append(f"{topic}-{partition} on broker {node}")


def _log_end(directory: Path) -> int:
    segments = segment_files(directory)
    if not segments:
        return 0
    dump = dump_segment(segments[-1])
    return dump.batches[-1].last_offset + 1 if dump.batches else dump.base_offset


def _rolled_at(directory: Path, segment_bytes: int) -> bool:
    """Whether the log's segments rolled at ``segment_bytes``: a segment past that size
    holds a single batch (one batch is never split)."""
    return all(path.stat().st_size <= segment_bytes or len(dump_segment(path).batches) <= 1
               for path in segment_files(directory))


# -- an auto-create racing a CreateTopics ------------------------------------------------------

@dataclass
class RaceResult:
    """``explicit_won``: rounds whose CreateTopics succeeded (the others lost to an
    auto-create and were answered TOPIC_ALREADY_EXISTS); ``configs``: the checks of every
    replica against the topic that won, as :func:`run_config_rounds` makes them."""

    rounds: int
    explicit_won: int = 0
    #: Metadata answers of the racing auto-creates, by error name.
    auto_answers: dict[str, int] = field(default_factory=dict)
    configs: ConfigRoundsResult = field(default_factory=lambda: ConfigRoundsResult(
        ConfigRoundsConfig()))
    problems: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.problems and self.configs.valid


def run_create_race_rounds(cluster: Cluster, rounds: int = 10,
                           configs: Mapping[str, str] = COMPACT_CONFIGS) -> RaceResult:
    """Each round: CreateTopics with ``configs`` (to the controller, through confluent-kafka)
    and, at the same moment, a Metadata request allowing auto-creation of the same name to
    every other broker. One topic must result, with the CreateTopics' configs if it
    succeeded (else the defaults, and TOPIC_ALREADY_EXISTS for it); no auto-create is
    answered TOPIC_ALREADY_EXISTS; then every replica is checked as in
    :func:`run_config_rounds` against the configs of the topic that won."""
    result = RaceResult(rounds, configs=ConfigRoundsResult(ConfigRoundsConfig(
        topic_prefix="race", topics=rounds, configs=dict(configs))))
    admin = _admin(cluster.bootstrap)
    view = ZooKeeperView(cluster.zookeeper_connect)
    try:
        for number in range(rounds):
            name = f"race-{number}"
            controller = cluster.controller_id()
            others = [b for n, b in sorted(cluster.brokers.items()) if n != controller]
            start = threading.Barrier(len(others) + 1)
            answers: list[int] = []
            delay = RACE_DELAYS[number % len(RACE_DELAYS)]
            threads = [threading.Thread(target=_auto_create,
                                        args=(b.bootstrap, name, start, delay, answers))
                       for b in others]
            for thread in threads:
                thread.start()
            future = admin.create_topics([NewTopic(name, 3, 3, config=dict(configs))])[name]
            start.wait()
            try:
                future.result(30)
                won = True
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
                won = False
            for thread in threads:
                thread.join(30)
            for code in answers:
                label = "NONE" if code == 0 else error_name(code)
                result.auto_answers[label] = result.auto_answers.get(label, 0) + 1
                if label == "TOPIC_ALREADY_EXISTS":
                    result.problems.append(f"{name}: an auto-create was answered {label}")
            result.explicit_won += won
            stored = view.topic_configs(name)
            expected = dict(configs) if won else {}
            if stored != expected:
                result.problems.append(f"{name}: CreateTopics {'won' if won else 'lost'} but "
                                       f"the topic's configs are {stored}")
            placed = view.topic_replicas(name)  # the auto-create's: broker defaults
            check = ConfigRoundsConfig(topic_prefix=name, topics=1, configs=expected,
                                       partitions=len(placed),
                                       replication_factor=len(placed.get(0, ())))
            _produce_at_once(cluster.bootstrap, name, check, result.configs, keyless=won)
            _check_configs(cluster, view, name, check, result.configs)
    finally:
        view.close()
    return result


def _auto_create(address: str, topic: str, start: threading.Barrier, delay: float,
                 answers: list[int]) -> None:
    """``delay`` seconds after every racer is ready, a Metadata request allowing
    auto-creation of ``topic``; its answer's error code goes to ``answers``."""
    start.wait()
    time.sleep(delay)
    answers.append(broker_view(address, topic, auto_create=True).error_code)
