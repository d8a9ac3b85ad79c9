"""Topic administration through a metadata store: create, delete, add partitions, set configs.

Each operation reads the store's current image, validates the request against it with Kafka's
rules and error codes, and writes the result as :mod:`strom.metadata.changes` conditioned on the
image's epoch (:func:`strom.controller.updates.update`: planned again when another writer got
in between). Every ``validate_only`` call runs the same checks and writes nothing. Configs that
strom accepts but ignores (``message.format.version`` …) are logged at WARNING when written.

New partitions start as Kafka's controller starts them: leader epoch 0, ISR = the replicas
that are registered (live) brokers, leader = the first of those (-1 if none is live). On one
broker this is leader = ISR = replicas = [this node], epoch 0, and nothing changes it.

Creation is all or nothing on this broker: the logs of the new partitions it hosts are
created (:class:`PartitionStorage`) *before* the metadata names them, and removed again if
that fails or the write does not happen. A client whose CreateTopics / CreatePartitions fails
half-way gets the storage error, and its retry starts from a clean slate (Kafka's controller
writes the metadata first and lets a broker that cannot create a log take its log directory
offline; one broker has no other replica to fall back on).

Synchronous and single-threaded: called from the broker's event loop (the store notifies its
subscribers before a call returns).
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TypeVar

from strom.common.config import (
    TOPIC_KEYS,
    BrokerConfig,
    ignored_config_notes,
    validate_topic_configs,
)
from strom.common.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaError,
    TopicAlreadyExistsError,
    TopicDeletionDisabledError,
    UnknownTopicOrPartitionError,
)
from strom.common.names import INTERNAL_TOPICS, validate_topic_name
from strom.controller.limits import BrokerPartitionCounts, ReplicaCounter
from strom.controller.placement import Assignment, assign_added_partitions, assign_replicas
from strom.controller.updates import Plan, update
from strom.metadata.changes import (
    NO_LEADER,
    MetadataChange,
    PutTopic,
    RemoveTopic,
    SetPartitions,
    SetTopicConfigs,
)
from strom.metadata.image import MetadataImage, PartitionInfo, TopicInfo
from strom.metadata.store import MetadataStore

log = logging.getLogger("strom.controller")
T = TypeVar("T")

#: Partitions created on this broker for a write, as (topic, partition) pairs.
Prepared = list[tuple[str, int]]


class PartitionStorage(Protocol):
    """The local storage of new partitions, made ready before the metadata names them
    (implemented by the replica manager)."""

    def prepare_partitions(self, topic: TopicInfo, partitions: Sequence[PartitionInfo], *,
                           sync: bool = True) -> Prepared:
        """Create the logs of those ``partitions`` this broker hosts, with ``topic``'s
        configs; all or nothing (on failure nothing it created remains and a KafkaError is
        raised). Returns what it created. With ``sync`` False the new directories are made
        durable only by a later :meth:`sync_prepared`."""
        ...

    def sync_prepared(self) -> None:
        """Make the directories of logs prepared with ``sync=False`` durable (raises
        ``OSError``)."""
        ...

    async def prepare_new(self, topics: Sequence[tuple[TopicInfo, Sequence[PartitionInfo]]]
                          ) -> list[Prepared | KafkaError]:
        """:meth:`prepare_partitions` with ``sync=False`` for each of ``topics`` (possibly off
        the event loop): per topic what it created, or its KafkaError (nothing of it kept)."""
        ...

    async def sync_new(self) -> None:
        """:meth:`sync_prepared`, possibly off the event loop."""
        ...

    def discard_partitions(self, prepared: Prepared) -> None:
        """Remove logs :meth:`prepare_partitions` created for a write that did not happen."""
        ...


class TopicAdmin:
    """The controller's topic operations over ``store``, with defaults from ``config``
    (``num.partitions``, ``default.replication.factor``, ``delete.topic.enable``); new
    partitions get their local logs from ``storage`` before the metadata write (none: the
    store's subscribers create them)."""

    def __init__(self, store: MetadataStore, config: BrokerConfig, *,
                 rng: random.Random | None = None,
                 storage: PartitionStorage | None = None) -> None:
        self._store = store
        self._config = config
        self._rng = rng or random.Random()
        self._storage = storage
        self._replica_counter = ReplicaCounter()

    def create_topic(
        self,
        name: str,
        partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str] | None = None,
        *,
        assignments: Mapping[int, Sequence[int]] | None = None,
        internal: bool = False,
        validate_only: bool = False,
    ) -> TopicInfo:
        """Create a topic; return it (as it would be, for ``validate_only``: then its id is
        random and unused).

        ``-1`` partitions / replication factor take the broker defaults. ``assignments``
        (partition -> replica ids) replaces both and must number partitions ``0..N-1`` with the
        same number of distinct, registered brokers each. Topics named like Kafka's internal
        topics are internal, as is any created with ``internal=True``."""
        overrides = dict(configs or {})

        def plan(image: MetadataImage) -> tuple[list[MetadataChange], TopicInfo]:
            topic = self.plan_topic(image, self.partition_counts(image), name, partitions,
                                    replication_factor, overrides, assignments=assignments,
                                    internal=internal)
            return [PutTopic(topic)], topic

        created = self._update(plan, validate_only)
        if not validate_only:
            _warn_ignored(name, overrides)
        return created

    def delete_topic(self, name: str) -> TopicInfo:
        """Delete a topic (TOPIC_DELETION_DISABLED unless ``delete.topic.enable``).

        Internal topics are refused with INVALID_TOPIC_EXCEPTION: deleting
        ``__consumer_offsets`` would drop every committed offset. Kafka's own command-line tool
        refused this; its broker does not check, strom's does so that every client is covered.
        """
        if not self._config.get("delete.topic.enable"):
            raise TopicDeletionDisabledError("Topic deletion is disabled.")

        def plan(image: MetadataImage) -> tuple[list[MetadataChange], TopicInfo]:
            topic = _require_not_internal(image, name, "deleted")
            return [RemoveTopic(name)], topic

        return self._update(plan, False)

    def add_partitions(
        self,
        name: str,
        total: int,
        assignments: Sequence[Sequence[int]] | None = None,
        *,
        validate_only: bool = False,
    ) -> TopicInfo:
        """Grow a topic to ``total`` partitions; ``assignments`` lists the replicas of each new
        partition in order (else they are placed like Kafka does).

        Internal topics are refused (INVALID_TOPIC_EXCEPTION): a group's or transactional id's
        partition is its hash modulo the partition count, so growing ``__consumer_offsets``
        would orphan every committed offset."""

        def plan(image: MetadataImage) -> tuple[list[MetadataChange], TopicInfo]:
            return self.plan_added_partitions(image, self.partition_counts(image), name, total,
                                              assignments)

        return self._update(plan, validate_only)

    def set_topic_configs(self, name: str, configs: Mapping[str, str], *,
                          validate_only: bool = False) -> TopicInfo:
        """Replace a topic's config overrides with ``configs`` (validated first)."""
        overrides = dict(configs)
        validate_topic_configs(overrides)

        def plan(image: MetadataImage) -> tuple[list[MetadataChange], TopicInfo]:
            topic = _require(image, name)
            updated = TopicInfo(topic.name, topic.topic_id, topic.partitions, overrides,
                                topic.internal)
            return [SetTopicConfigs(name, overrides)], updated

        updated = self._update(plan, validate_only)
        if not validate_only:
            _warn_ignored(name, overrides)
        return updated

    # -- planning against an image (also used for batches, :mod:`.topic_writes`) ------------
    def partition_counts(self, image: MetadataImage) -> BrokerPartitionCounts:
        """Partition replicas per broker in ``image``, against ``max.broker.partitions``."""
        return BrokerPartitionCounts(self._replica_counter.counts(image),
                                     int(self._config.get("max.broker.partitions")))

    def plan_topic(self, image: MetadataImage, counts: BrokerPartitionCounts, name: str,
                   partitions: int = -1, replication_factor: int = -1,
                   configs: Mapping[str, str] | None = None, *,
                   assignments: Mapping[int, Sequence[int]] | None = None,
                   internal: bool = False) -> TopicInfo:
        """The topic :meth:`create_topic` would create in ``image`` (raises Kafka's error
        when it cannot); its partitions are counted in ``counts``."""
        internal = internal or name in INTERNAL_TOPICS
        topic = self._new_topic(image, name, partitions, replication_factor,
                                dict(configs or {}), assignments, internal)
        counts.check(name, topic.partitions, exempt=internal)
        return topic

    def plan_added_partitions(self, image: MetadataImage, counts: BrokerPartitionCounts,
                              name: str, total: int,
                              assignments: Sequence[Sequence[int]] | None = None
                              ) -> tuple[list[MetadataChange], TopicInfo]:
        """The change :meth:`add_partitions` would write in ``image`` and the grown topic."""
        topic = _require_not_internal(image, name, "given more partitions")
        current = len(topic.partitions)
        if total <= current:
            raise InvalidPartitionsError(
                f"Topic currently has {current} partitions, which is higher than or equal "
                f"to the requested {total}.")
        replication = len(topic.partitions[0].replicas)
        if assignments is None:
            placed = assign_added_partitions(
                image.brokers.values(), [p.replicas for p in topic.partitions], total,
                rng=self._rng)
        else:
            if len(assignments) != total - current:
                raise InvalidReplicaAssignmentError(
                    f"Increasing the number of partitions by {total - current} but "
                    f"{len(assignments)} assignments provided.")
            placed = {current + i: tuple(a) for i, a in enumerate(assignments)}
            _check_assignment(image, placed, replication)
        new = tuple(_initial_state(image, p, replicas) for p, replicas in placed.items())
        counts.check(name, new)
        grown = TopicInfo(topic.name, topic.topic_id, topic.partitions + new,
                          dict(topic.configs), topic.internal)
        return [SetPartitions(name, new)], grown

    # ----------------------------------------------------------------------------------------
    def _update(self, plan: Plan[T], validate_only: bool) -> T:
        """:func:`update`, with the new partitions' local logs created before each write and
        discarded unless it happened (topic creation is all or nothing)."""
        def before_write(image: MetadataImage, changes: Sequence[MetadataChange]
                         ) -> Callable[[], None]:
            prepared = self._prepare(image, changes)
            return lambda: self._discard(prepared)

        return update(self._store, plan, validate_only, before_write=before_write)

    def _prepare(self, image: MetadataImage, changes: Sequence[MetadataChange]) -> Prepared:
        """Create the local storage of every partition ``changes`` add to ``image``."""
        storage = self._storage
        prepared: Prepared = []
        if storage is None:
            return prepared
        try:
            for change in changes:
                if isinstance(change, PutTopic) and change.topic.name not in image.topics:
                    prepared += storage.prepare_partitions(change.topic, change.topic.partitions)
                elif isinstance(change, SetPartitions) and change.topic in image.topics:
                    topic = image.topics[change.topic]
                    new = [p for p in change.partitions if p.partition >= len(topic.partitions)]
                    if new:
                        prepared += storage.prepare_partitions(topic, new)
        except BaseException:
            self._discard(prepared)
            raise
        return prepared

    def _discard(self, prepared: Prepared) -> None:
        if prepared and self._storage is not None:
            self._storage.discard_partitions(prepared)

    def _new_topic(
        self,
        image: MetadataImage,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        assignments: Mapping[int, Sequence[int]] | None,
        internal: bool,
    ) -> TopicInfo:
        validate_topic_name(name)
        if name in image.topics:
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        existing = colliding_topic(image.topics, name)
        if existing is not None:
            raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {existing}")
        if assignments is not None:
            if partitions != -1 or replication_factor != -1:
                raise InvalidRequestError(
                    "Both numPartitions or replicationFactor and replicasAssignments were set. "
                    "Both cannot be used at the same time.")
            placed = {int(p): tuple(r) for p, r in assignments.items()}
            if sorted(placed) != list(range(len(placed))) or not placed:
                raise InvalidReplicaAssignmentError("Partitions must be numbered 0..N-1.")
            _check_assignment(image, placed, len(placed[0]))
        else:
            if partitions == -1:
                partitions = int(self._config.get("num.partitions"))
            if replication_factor == -1:
                replication_factor = int(self._config.get("default.replication.factor"))
            placed = assign_replicas(image.brokers.values(), partitions, replication_factor,
                                     rng=self._rng)
        validate_topic_configs(configs)
        states = tuple(_initial_state(image, p, placed[p]) for p in sorted(placed))
        return TopicInfo(name, uuid.uuid4(), states, configs, internal)


def _warn_ignored(topic: str, configs: Mapping[str, str]) -> None:
    for note in ignored_config_notes(TOPIC_KEYS, configs):
        log.warning("Topic %s: %s", topic, note)


def _require(image: MetadataImage, name: str) -> TopicInfo:
    topic = image.topics.get(name)
    if topic is None:
        raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
    return topic


def _require_not_internal(image: MetadataImage, name: str, action: str) -> TopicInfo:
    topic = _require(image, name)
    if topic.internal:
        raise InvalidTopicError(f"Topic {name} is an internal topic and cannot be {action}.")
    return topic


def _collision_key(name: str) -> str:
    """Kafka refuses topics whose names differ only in '.' versus '_' (metric names clash)."""
    return name.replace(".", "_")


#: Up to this many '.' / '_' in a name, its collisions are looked up by spelling them out.
_SPELLED_OUT_COLLISIONS = 8


def colliding_topic(topics: Mapping[str, object], name: str) -> str | None:
    """An existing topic whose name differs from ``name`` only in '.' versus '_' (None if
    none): looked up through every such spelling of ``name`` (2**k dictionary lookups for k
    dots and underscores), not by walking all topics — except for names with more than
    eight of them."""
    marks = [i for i, c in enumerate(name) if c in "._"]
    if not marks:
        return None
    if len(marks) > _SPELLED_OUT_COLLISIONS:
        key = _collision_key(name)
        return next((t for t in topics if t != name and _collision_key(t) == key), None)
    chars = list(name)
    for bits in range(1 << len(marks)):
        for j, i in enumerate(marks):
            chars[i] = "_" if bits >> j & 1 else "."
        spelled = "".join(chars)
        if spelled != name and spelled in topics:
            return spelled
    return None


def _check_assignment(image: MetadataImage, placed: Assignment, replication: int) -> None:
    for partition, replicas in sorted(placed.items()):
        if not replicas:
            raise InvalidReplicaAssignmentError(
                f"Cannot have replication factor of 0 for partition id {partition}.")
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(
                f"Duplicate brokers in the replica assignment of partition {partition}: "
                f"{list(replicas)}.")
        unknown = sorted(set(replicas) - set(image.brokers))
        if unknown:
            raise InvalidReplicaAssignmentError(
                f"Unknown broker(s) {unknown} in the replica assignment of partition "
                f"{partition}.")
        if len(replicas) != replication:
            raise InvalidReplicaAssignmentError(
                f"Inconsistent replication factor: partition {partition} has "
                f"{len(replicas)} replicas, expected {replication}.")


def _initial_state(image: MetadataImage, partition: int, replicas: Sequence[int]) -> PartitionInfo:
    live = tuple(r for r in replicas if r in image.brokers)
    return PartitionInfo(partition, live[0] if live else NO_LEADER, 0, tuple(replicas), live)
