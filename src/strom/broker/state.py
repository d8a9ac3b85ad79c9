"""Everything the handlers share: configuration, metadata, partitions, admin operations.

One :class:`BrokerState` per broker, built by :mod:`strom.broker.server` and passed to each
handler at construction. Owned by the event-loop thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from strom.broker.access import Access
from strom.broker.quotas.manager import ClientQuotas
from strom.common.clock import Clock
from strom.common.config import BrokerConfig, TopicConfig, validate_topic_configs
from strom.common.errors import TopicAlreadyExistsError, error_class
from strom.controller.broker_configs import BrokerConfigAdmin
from strom.controller.driver import ControllerDriver
from strom.controller.internal_topics import internal_min_isr, internal_replication_factor
from strom.controller.producer_ids import ProducerIdManager
from strom.controller.topic_writes import TopicWriteQueue
from strom.controller.topics import TopicAdmin
from strom.coordinator.group.consumer.settings import ConsumerSettings, assignor_names
from strom.coordinator.group.coordinator import GroupCoordinator, GroupSettings
from strom.coordinator.group.records import OFFSETS_TOPIC
from strom.coordinator.txn.coordinator import TXN_TOPIC, TxnCoordinator, TxnSettings
from strom.coordinator.txn.verifier import RemoteTxnVerifier
from strom.metadata.image import TopicInfo
from strom.metadata.store import MetadataStore
from strom.replication.quota import ReplicationQuotas
from strom.replication.replica_manager import ReplicaManager


@dataclass
class BrokerState:
    """``config`` is the effective configuration (static config under the dynamic broker
    configs); :class:`strom.broker.dynamic_config.DynamicConfigApplier` replaces it when the
    dynamic configs change, so read it at use, never keep it."""

    config: BrokerConfig
    data_dir: Path
    clock: Clock
    store: MetadataStore
    replicas: ReplicaManager
    producer_ids: ProducerIdManager
    group_coordinator: GroupCoordinator | None = None
    txn_coordinator: TxnCoordinator | None = None
    #: KIP-890 verification with a transaction coordinator on another broker (set by the
    #: server; None: only a local coordinator can verify).
    txn_verifier: RemoteTxnVerifier | None = None
    #: Authorization (:mod:`strom.broker.access`); allows everything until the server sets
    #: the configured authorizer.
    access: Access = field(default_factory=lambda: Access(None))
    #: The client quotas (kept current by the server through a store subscription).
    quotas: ClientQuotas = field(default_factory=ClientQuotas)
    #: The controller's decision loop on ZooKeeper metadata (None on the file-backed store,
    #: where this broker alone decides); ``controller.active`` while this broker is it.
    controller: ControllerDriver | None = None
    topic_admin: TopicAdmin = field(init=False)
    #: CreateTopics / CreatePartitions writes, batched (:mod:`strom.controller.topic_writes`).
    topic_writes: TopicWriteQueue = field(init=False)
    broker_configs: BrokerConfigAdmin = field(init=False)
    #: Replication throttles (KIP-73); the server keeps them current from each image.
    replication_quotas: ReplicationQuotas = field(init=False)

    def __post_init__(self) -> None:
        self.topic_admin = TopicAdmin(self.store, self.config, storage=self.replicas)
        self.topic_writes = TopicWriteQueue(
            self.topic_admin, self.store, self.replicas, commit=getattr(self.store, "commit", None),
            write=getattr(self.store, "write_async", None),
            default_partitions=lambda: int(self.config.get("num.partitions")))
        self.broker_configs = BrokerConfigAdmin(self.store, self.node_id)
        self.replication_quotas = ReplicationQuotas.for_broker(self.config, self.node_id,
                                                               self.clock.monotonic)

    @property
    def groups(self) -> GroupCoordinator:
        """The group coordinator (set by the server at start-up; its shards load in the
        background, answering COORDINATOR_LOAD_IN_PROGRESS until they are ready)."""
        if self.group_coordinator is None:
            raise error_class("COORDINATOR_LOAD_IN_PROGRESS")("group coordinator not loaded")
        return self.group_coordinator

    @property
    def txns(self) -> TxnCoordinator:
        """The transaction coordinator (set by the server at start-up)."""
        if self.txn_coordinator is None:
            raise error_class("COORDINATOR_LOAD_IN_PROGRESS")("transaction coordinator not "
                                                              "loaded")
        return self.txn_coordinator

    def txn_settings(self) -> TxnSettings:
        config = self.config
        topic = self.store.image.topics.get(TXN_TOPIC)
        return TxnSettings(
            partitions=len(topic.partitions) if topic is not None else int(
                config.get("transaction.state.log.num.partitions")),
            max_timeout_ms=int(config.get("transaction.max.timeout.ms")),
            abort_interval_ms=int(config.get(
                "transaction.abort.timed.out.transaction.cleanup.interval.ms")),
            id_expiration_ms=int(config.get("transactional.id.expiration.ms")),
            remove_interval_ms=int(config.get(
                "transaction.remove.expired.transaction.cleanup.interval.ms")),
        )

    def group_settings(self) -> GroupSettings:
        config = self.config
        offsets = self.store.image.topics.get(OFFSETS_TOPIC)
        return GroupSettings(
            partitions=len(offsets.partitions) if offsets is not None else int(
                config.get("offsets.topic.num.partitions")),
            min_session_timeout_ms=int(config.get("group.min.session.timeout.ms")),
            max_session_timeout_ms=int(config.get("group.max.session.timeout.ms")),
            max_size=int(config.get("group.max.size")),
            initial_rebalance_delay_ms=int(config.get("group.initial.rebalance.delay.ms")),
            offsets_retention_ms=int(config.get("offsets.retention.minutes")) * 60_000,
            metadata_max_bytes=int(config.get("offset.metadata.max.bytes")),
            consumer=ConsumerSettings(
                session_timeout_ms=int(config.get("group.consumer.session.timeout.ms")),
                heartbeat_interval_ms=int(config.get("group.consumer.heartbeat.interval.ms")),
                max_size=int(config.get("group.consumer.max.size")),
                assignors=assignor_names(config.get("group.consumer.assignors")),
            ),
        )

    def ensure_offsets_topic(self) -> None:
        """Create the internal, compacted ``__consumer_offsets`` topic if it is missing.

        Called on the first FindCoordinator or group write, as Kafka does (a fresh broker
        lists no topics); a broker restarted on existing data loads the topic at start."""
        if OFFSETS_TOPIC in self.store.image.topics:
            return
        configs = {
            "cleanup.policy": "compact",
            "segment.bytes": str(self.config.get("offsets.topic.segment.bytes")),
            "compression.type": "producer",
        }
        self._create_internal(
            OFFSETS_TOPIC, int(self.config.get("offsets.topic.num.partitions")),
            self._internal_factor(OFFSETS_TOPIC, "offsets.topic.replication.factor"), configs)

    def ensure_txn_topic(self) -> None:
        """Create the internal, compacted ``__transaction_state`` topic if it is missing
        (on the first transactional FindCoordinator or InitProducerId, as Kafka does)."""
        if TXN_TOPIC in self.store.image.topics:
            return
        factor = self._internal_factor(TXN_TOPIC, "transaction.state.log.replication.factor")
        configs = {
            "cleanup.policy": "compact",
            "segment.bytes": str(self.config.get("transaction.state.log.segment.bytes")),
            "compression.type": "uncompressed",
            "unclean.leader.election.enable": "false",
            "min.insync.replicas": str(internal_min_isr(
                int(self.config.get("transaction.state.log.min.isr")), factor)),
        }
        self._create_internal(
            TXN_TOPIC, int(self.config.get("transaction.state.log.num.partitions")), factor,
            configs)

    def _create_internal(self, topic: str, partitions: int, replication_factor: int,
                         configs: Mapping[str, str]) -> None:
        """Create an internal topic; one that another broker created first (its metadata
        has not reached this broker yet) is no error: the caller sees it missing from the
        image for a moment and answers COORDINATOR_NOT_AVAILABLE, as Kafka does."""
        with contextlib.suppress(TopicAlreadyExistsError):
            self.topic_admin.create_topic(topic, partitions, replication_factor, dict(configs),
                                          internal=True)

    def _internal_factor(self, topic: str, key: str) -> int:
        return internal_replication_factor(topic, int(self.config.get(key)),
                                           len(self.store.image.brokers))

    @property
    def node_id(self) -> int:
        return int(self.config.get("node.id"))

    def topic_config(self, topic: str) -> TopicConfig:
        info = self.store.image.topics.get(topic)
        overrides = validate_topic_configs(info.configs) if info else {}
        return TopicConfig(self.config, overrides)

    # -- topic administration (CreateTopics, auto-create, DeleteTopics, CreatePartitions,
    # AlterConfigs): decided by the controller, then the hosted partitions follow the image ----
    def check_new_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str],
        *, assignments: Mapping[int, Sequence[int]] | None = None,
    ) -> tuple[int, int]:
        """Validate a topic creation; return the effective (partitions, replication factor)."""
        topic = self.topic_admin.create_topic(name, partitions, replication_factor, configs,
                                              assignments=assignments, validate_only=True)
        return len(topic.partitions), len(topic.partitions[0].replicas)

    def create_topic(
        self, name: str, partitions: int = -1, replication_factor: int = -1,
        configs: dict[str, str] | None = None,
        *, assignments: Mapping[int, Sequence[int]] | None = None,
    ) -> TopicInfo:
        topic = self.topic_admin.create_topic(name, partitions, replication_factor, configs,
                                              assignments=assignments)
        return topic

    def delete_topic(self, name: str) -> TopicInfo:
        topic = self.topic_admin.delete_topic(name)
        return topic

    def add_partitions(self, name: str, count: int,
                       assignments: Sequence[Sequence[int]] | None = None) -> TopicInfo:
        topic = self.topic_admin.add_partitions(name, count, assignments)
        return topic

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicInfo:
        topic = self.topic_admin.set_topic_configs(name, configs)
        return topic
