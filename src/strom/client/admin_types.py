"""Arguments and results of :class:`~strom.client.admin.AdminClient` (plain, immutable data)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from strom.client.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerAssignment,
    ConsumerSubscription,
)
from strom.client.metadata import BrokerNode, PartitionMetadata
from strom.common.types import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    TopicPartition,
)


class ResourceType(enum.IntEnum):
    """Config resource types (DescribeConfigs / AlterConfigs)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


class ConfigResource(NamedTuple):
    """A topic (by name) or a broker (by id, as a string; ``""`` = cluster-wide default)."""

    type: ResourceType
    name: str

    @classmethod
    def topic(cls, name: str) -> ConfigResource:
        return cls(ResourceType.TOPIC, name)

    @classmethod
    def broker(cls, broker_id: int | str) -> ConfigResource:
        return cls(ResourceType.BROKER, str(broker_id))


class AlterConfigOpType(enum.IntEnum):
    """IncrementalAlterConfigs operations."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class AlterConfigOp(NamedTuple):
    name: str
    op: AlterConfigOpType
    value: str | None = None


class ConfigSynonym(NamedTuple):
    name: str
    value: str | None
    source: int


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config value as DescribeConfigs reports it; ``source`` is a ConfigSource code."""

    name: str
    value: str | None
    source: int
    read_only: bool
    sensitive: bool
    synonyms: tuple[ConfigSynonym, ...] = ()
    config_type: int = 0
    documentation: str | None = None

    @property
    def is_default(self) -> bool:
        return self.source == 5  # ConfigSource.DEFAULT_CONFIG


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create. ``-1`` partitions / replication factor mean the broker's defaults."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str | None] = field(default_factory=dict)
    assignments: Mapping[int, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CreatedTopic:
    """What CreateTopics reported for one topic (v5+ includes the effective values)."""

    name: str
    num_partitions: int
    replication_factor: int
    topic_id: str | None = None


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    partitions: tuple[PartitionMetadata, ...]
    is_internal: bool = False
    topic_id: str | None = None


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerNode, ...]


@dataclass(frozen=True, slots=True)
class BrokerApiVersions:
    """One broker's ApiVersions answer: ``ranges`` maps api key → (min, max) version it
    serves; ``usable`` maps api key → the version strom's client picks (APIs both sides
    speak only)."""

    node: BrokerNode
    ranges: Mapping[int, tuple[int, int]]
    usable: Mapping[int, int]


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """One partition replica in a log dir."""

    topic: str
    partition: int
    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    path: str
    error_code: int
    replicas: tuple[ReplicaInfo, ...]
    total_bytes: int = -1
    usable_bytes: int = -1


class OffsetSpec:
    """ListOffsets targets: the sentinels, or any timestamp in ms (first offset at or after)."""

    EARLIEST = EARLIEST_TIMESTAMP
    LATEST = LATEST_TIMESTAMP
    MAX_TIMESTAMP = MAX_TIMESTAMP
    EARLIEST_LOCAL = EARLIEST_LOCAL_TIMESTAMP  # the first offset on local disk (KIP-405)
    LATEST_TIERED = LATEST_TIERED_TIMESTAMP  # the last offset in tiered storage (-1: none)


class OffsetAndTimestamp(NamedTuple):
    """A ListOffsets answer: ``offset`` is -1 when no record matches the timestamp."""

    offset: int
    timestamp: int
    leader_epoch: int = -1


# -- consumer groups ----------------------------------------------------------------------------
class GroupState:
    """Group states as the broker names them (DescribeGroups / ListGroups): the classic
    ones, and KIP-848 consumer groups' Assigning / Reconciling."""

    EMPTY = "Empty"
    STABLE = "Stable"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    DEAD = "Dead"
    ALL = (EMPTY, STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, ASSIGNING, RECONCILING,
           DEAD)


class GroupType:
    """Group types as ListGroups v5 names them (Kafka's ``GroupType``; strom has classic and
    consumer groups so far)."""

    CLASSIC = "classic"
    CONSUMER = "consumer"
    SHARE = "share"
    STREAMS = "streams"
    ALL = (CLASSIC, CONSUMER, SHARE, STREAMS)


@dataclass(frozen=True, slots=True)
class GroupListing:
    """One group from ListGroups; ``state`` is None when the broker is older than v4."""

    group_id: str
    protocol_type: str
    state: str | None = None
    group_type: str | None = None

    @property
    def is_consumer_group(self) -> bool:
        return self.protocol_type in (CONSUMER_PROTOCOL_TYPE, "")


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """One member of a group. ``subscription`` / ``assignment`` are decoded for groups using
    the ``consumer`` protocol (None otherwise, or when the bytes could not be decoded);
    ``metadata`` / ``assignment_bytes`` keep the raw bytes either way."""

    member_id: str
    client_id: str
    client_host: str
    group_instance_id: str | None = None
    subscription: ConsumerSubscription | None = None
    assignment: ConsumerAssignment | None = None
    metadata: bytes = b""
    assignment_bytes: bytes = b""

    @property
    def partitions(self) -> tuple[TopicPartition, ...]:
        """The assigned partitions (none when unknown)."""
        return self.assignment.partitions if self.assignment is not None else ()


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group as its coordinator describes it. ``protocol`` is the chosen assignor for
    consumer groups (``range``, ``roundrobin``, ``cooperative-sticky``, …).
    ``authorized_operations`` holds AclOperation codes when the broker reported them."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]
    coordinator: BrokerNode | None = None
    authorized_operations: frozenset[int] | None = None

    @property
    def is_active(self) -> bool:
        """Whether consumers are in the group (its offsets cannot be reset or deleted then)."""
        return bool(self.members) or self.state not in (GroupState.EMPTY, GroupState.DEAD)


class OffsetAndMetadata(NamedTuple):
    """A committed offset: the next offset to consume, with the committer's metadata."""

    offset: int
    metadata: str | None = ""
    leader_epoch: int = -1


# -- transactions (KIP-664) ---------------------------------------------------------------------
class TransactionState:
    """Transaction state names as DescribeTransactions / ListTransactions carry them."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"
    ALL = (EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT,
           DEAD, PREPARE_EPOCH_FENCE)


@dataclass(frozen=True, slots=True)
class ProducerState:
    """An active producer of one partition (DescribeProducers). ``coordinator_epoch`` is
    None before the producer's first marker; ``current_transaction_start_offset`` is the
    first offset of its open transaction on this partition, None when none is open."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int | None
    current_transaction_start_offset: int | None


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """One transactional id as ListTransactions lists it, with the broker coordinating it."""

    transactional_id: str
    producer_id: int
    state: str
    coordinator_id: int


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """A transactional id's state at its coordinator (DescribeTransactions);
    ``transaction_start_time_ms`` is None when no transaction is open."""

    coordinator_id: int
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int | None
    topic_partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class AbortTransactionSpec:
    """Which transaction ``abort_transaction`` ends: an ABORT marker for ``producer_id`` /
    ``producer_epoch`` written to ``partition`` with ``coordinator_epoch`` (Kafka's
    AbortTransactionSpec)."""

    partition: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
