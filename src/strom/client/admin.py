"""``AdminClient``: topics, partitions, configs, records, offsets, cluster, log dirs, groups.

Every call returns plain data (:mod:`strom.client.admin_types`) or raises the
:class:`~strom.common.errors.KafkaError` subclass for the broker's error code, with the
broker's message when it sent one. Topic changes go to the controller (any broker when it is
unknown); partition-scoped calls go to each partition's leader; retriable errors are retried
until the request timeout. Consumer-group calls go to each group's coordinator
(:mod:`strom.client.group_admin`); transaction introspection and aborting a hanging
transaction (KIP-664) to leaders and transaction coordinators (:mod:`strom.client.txn_admin`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, overload

from strom.client import acl_admin, partition_admin, quota_admin, scram_admin
from strom.client.admin_types import (
    AbortTransactionSpec,
    AlterConfigOp,
    BrokerApiVersions,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConfigSynonym,
    CreatedTopic,
    GroupDescription,
    GroupListing,
    LogDirDescription,
    NewTopic,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    ProducerState,
    ReplicaInfo,
    ResourceType,
    TopicDescription,
    TransactionDescription,
    TransactionListing,
)
from strom.client.cluster import DEFAULT_BOOTSTRAP, Cluster, retrying, topic_error
from strom.client.conn import DEFAULT_REQUEST_TIMEOUT_S, Connection
from strom.client.group_admin import GroupAdmin
from strom.client.metadata import BrokerNode, uuid_text
from strom.client.offsets import READ_UNCOMMITTED, list_offsets
from strom.client.partition_admin import ElectionType, PartitionReassignment
from strom.client.quota_admin import Component, QuotaAlteration
from strom.client.scram_admin import ScramDelete, ScramUpsert, UserScramCredentials
from strom.client.security import ClientSecurity
from strom.client.txn_admin import TransactionAdmin
from strom.common.acl import AclBinding, AclFilter
from strom.common.errors import (
    InvalidRequestError,
    KafkaError,
    UnknownTopicOrPartitionError,
    error_class,
    error_for,
)
from strom.common.types import TopicPartition
from strom.protocol.versions import ApiKey

NotControllerError = error_class("NOT_CONTROLLER")


def _raise_for(code: int, message: str | None, what: str) -> None:
    if code:
        raise error_for(code, message or what)


class AdminClient:
    """Administrative operations against a strom (or Kafka) cluster.

    Lifecycle: ``await start()`` (or ``async with``), calls, ``await close()``. Runs on the event
    loop that started it; see :class:`strom.client.sync.SyncAdminClient` for blocking use.
    """

    def __init__(
        self,
        bootstrap: str = DEFAULT_BOOTSTRAP,
        *,
        client_id: str = "strom-admin",
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        security: ClientSecurity | None = None,
    ) -> None:
        self.cluster = Cluster(bootstrap, client_id=client_id,
                               request_timeout_s=request_timeout_s, security=security)
        self.request_timeout_s = request_timeout_s
        self.groups = GroupAdmin(self.cluster, request_timeout_s)
        self.transactions = TransactionAdmin(self.cluster, request_timeout_s)

    async def start(self) -> AdminClient:
        await self.cluster.start()
        return self

    async def close(self) -> None:
        await self.cluster.close()

    async def __aenter__(self) -> AdminClient:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def _timeout_ms(self) -> int:
        return int(self.request_timeout_s * 1000)

    async def _to_controller(self, api_key: int, build: Any, results: str | None = None) -> Any:
        """Send ``build(conn)`` to the controller; when a result (in the response's ``results``
        list, or the response's own error code when ``results`` is None) says NOT_CONTROLLER,
        refresh metadata and send again to the new controller."""

        async def attempt() -> Any:
            conn = await self.cluster.controller()
            response = await conn.request(api_key, build(conn))
            outcomes = [response] if results is None else getattr(response, results)
            if any(getattr(r, "error_code", 0) == NotControllerError.code for r in outcomes):
                raise NotControllerError(f"broker {conn.node_id} is not the controller")
            return response

        async def refresh(_exc: KafkaError) -> None:
            await self.cluster.refresh(None)

        return await retrying(attempt, timeout_s=self.request_timeout_s, on_retry=refresh)

    # -- topics ------------------------------------------------------------------------------
    async def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False
    ) -> dict[str, CreatedTopic]:
        """Create topics; raises the first topic's error (TopicAlreadyExistsError, …)."""

        def build(_conn: Connection) -> dict[str, Any]:
            return {
                "topics": [
                    {
                        "name": t.name,
                        "num_partitions": t.num_partitions if not t.assignments else -1,
                        "replication_factor": t.replication_factor if not t.assignments else -1,
                        "assignments": [
                            {"partition_index": p, "broker_ids": list(brokers)}
                            for p, brokers in sorted(t.assignments.items())
                        ],
                        "configs": [{"name": k, "value": v} for k, v in t.configs.items()],
                    }
                    for t in topics
                ],
                "timeout_ms": self._timeout_ms,
                "validate_only": validate_only,
            }

        response = await self._to_controller(ApiKey.CREATE_TOPICS, build, "topics")
        created: dict[str, CreatedTopic] = {}
        for result in response.topics:
            _raise_for(result.error_code, result.error_message, f"topic {result.name!r}")
            created[result.name] = CreatedTopic(
                result.name,
                getattr(result, "num_partitions", -1),
                getattr(result, "replication_factor", -1),
                uuid_text(getattr(result, "topic_id", None)),
            )
        if not validate_only:
            await self.cluster.refresh([t.name for t in topics])
        return created

    async def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str | None] | None = None,
        *,
        validate_only: bool = False,
    ) -> CreatedTopic:
        """Create one topic (see :meth:`create_topics`)."""
        topic = NewTopic(name, num_partitions, replication_factor, dict(configs or {}))
        result = await self.create_topics([topic], validate_only=validate_only)
        return result[name]

    async def delete_topics(self, names: Iterable[str]) -> None:
        """Delete topics by name; raises the first error (UnknownTopicOrPartitionError, …)."""
        wanted = list(names)

        def build(conn: Connection) -> dict[str, Any]:
            fields: dict[str, Any] = {"timeout_ms": self._timeout_ms}
            if conn.version(ApiKey.DELETE_TOPICS) >= 6:
                fields["topics"] = [{"name": n} for n in wanted]
            else:
                fields["topic_names"] = wanted
            return fields

        response = await self._to_controller(ApiKey.DELETE_TOPICS, build, "responses")
        for result in response.responses:
            _raise_for(result.error_code, getattr(result, "error_message", None),
                       f"topic {result.name!r}")
        self.cluster.forget_topics(wanted)

    async def list_topics(self, *, include_internal: bool = False) -> list[str]:
        """Names of all topics, sorted (internal topics such as __consumer_offsets on request)."""
        meta = await self.cluster.refresh(None)
        return sorted(
            name for name, t in meta.topics.items() if include_internal or not t.is_internal
        )

    async def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]:
        """Partitions, leaders, replicas and ISR of ``names`` (every topic when None)."""
        wanted = None if names is None else list(names)
        meta = await self.cluster.refresh(wanted)
        out: list[TopicDescription] = []
        for name in sorted(meta.topics) if wanted is None else wanted:
            topic = meta.topics.get(name)
            code = UnknownTopicOrPartitionError.code if topic is None else topic.error_code
            if code or topic is None:
                raise topic_error(code, name)
            out.append(TopicDescription(name, tuple(topic.partitions.values()),
                                        topic.is_internal, topic.topic_id))
        return out

    async def create_partitions(
        self, new_counts: Mapping[str, int], *, validate_only: bool = False
    ) -> None:
        """Grow topics to the given total partition counts."""

        def build(_conn: Connection) -> dict[str, Any]:
            return {
                "topics": [{"name": n, "count": c, "assignments": None}
                           for n, c in new_counts.items()],
                "timeout_ms": self._timeout_ms,
                "validate_only": validate_only,
            }

        response = await self._to_controller(ApiKey.CREATE_PARTITIONS, build, "results")
        for result in response.results:
            _raise_for(result.error_code, result.error_message, f"topic {result.name!r}")
        if not validate_only:
            await self.cluster.refresh(list(new_counts))

    # -- partitions: leader elections and reassignments (strom.client.partition_admin) -------
    async def elect_leaders(
        self, election_type: ElectionType = ElectionType.PREFERRED,
        partitions: Iterable[TopicPartition] | None = None,
    ) -> dict[TopicPartition, KafkaError | None]:
        """Elect leaders (preferred replica, or unclean: any live replica when none in sync)
        for ``partitions`` (None: every partition); each partition's outcome, None for done
        (ELECTION_NOT_NEEDED when the leader already is the one to elect)."""
        return await partition_admin.elect_leaders(
            self._to_controller, election_type, partitions, self._timeout_ms)

    async def alter_partition_reassignments(
        self, reassignments: Mapping[TopicPartition, Sequence[int] | None],
    ) -> dict[TopicPartition, KafkaError | None]:
        """Move partitions to new replica lists (None cancels a partition's ongoing
        reassignment); each partition's outcome, None when accepted."""
        return await partition_admin.alter_partition_reassignments(
            self._to_controller, reassignments, self._timeout_ms)

    async def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None,
    ) -> dict[TopicPartition, PartitionReassignment]:
        """The ongoing reassignments of ``partitions`` (None: of every partition)."""
        return await partition_admin.list_partition_reassignments(
            self._to_controller, partitions, self._timeout_ms)

    # -- configs -----------------------------------------------------------------------------
    async def _for_resource(self, resource: ConfigResource) -> Connection:
        if resource.type in (ResourceType.BROKER, ResourceType.BROKER_LOGGER) and resource.name:
            try:
                node = int(resource.name)
            except ValueError:
                raise InvalidRequestError(
                    f"broker id must be an integer, got {resource.name!r}"
                ) from None
            return await self.cluster.connection(node)
        return await self.cluster.any_connection()

    async def describe_configs(
        self,
        resources: Sequence[ConfigResource],
        *,
        include_synonyms: bool = False,
        include_documentation: bool = False,
        keys: Sequence[str] | None = None,
    ) -> dict[ConfigResource, list[ConfigEntry]]:
        """Config entries per resource (all keys, or only ``keys``)."""
        groups: dict[int, list[ConfigResource]] = defaultdict(list)
        conns: dict[int, Connection] = {}
        for resource in resources:
            conn = await self._for_resource(resource)
            conns[id(conn)] = conn
            groups[id(conn)].append(resource)
        out: dict[ConfigResource, list[ConfigEntry]] = {}
        for key, group in groups.items():
            conn = conns[key]
            fields = {
                "resources": [
                    {"resource_type": int(r.type), "resource_name": r.name,
                     "configuration_keys": None if keys is None else list(keys)}
                    for r in group
                ],
                "include_synonyms": include_synonyms,
                "include_documentation": include_documentation,
            }
            response = await conn.request(ApiKey.DESCRIBE_CONFIGS, fields)
            for result in response.results:
                what = f"{ResourceType(result.resource_type).name.lower()} {result.resource_name!r}"
                _raise_for(result.error_code, result.error_message, what)
                resource = ConfigResource(ResourceType(result.resource_type), result.resource_name)
                out[resource] = [_config_entry(c) for c in result.configs]
        return out

    async def alter_configs(
        self,
        resource: ConfigResource,
        configs: Mapping[str, str | None],
        *,
        validate_only: bool = False,
    ) -> None:
        """Replace the resource's whole set of overrides with ``configs`` (legacy AlterConfigs)."""
        conn = await self._for_resource(resource)
        fields = {
            "resources": [{
                "resource_type": int(resource.type),
                "resource_name": resource.name,
                "configs": [{"name": k, "value": v} for k, v in configs.items()],
            }],
            "validate_only": validate_only,
        }
        response = await conn.request(ApiKey.ALTER_CONFIGS, fields)
        for result in response.responses:
            _raise_for(result.error_code, result.error_message, f"{resource.name!r}")

    async def incremental_alter_configs(
        self,
        resource: ConfigResource,
        ops: Sequence[AlterConfigOp],
        *,
        validate_only: bool = False,
    ) -> None:
        """Set, delete, append to or subtract from individual keys."""
        conn = await self._for_resource(resource)
        fields = {
            "resources": [{
                "resource_type": int(resource.type),
                "resource_name": resource.name,
                "configs": [{"name": op.name, "config_operation": int(op.op), "value": op.value}
                            for op in ops],
            }],
            "validate_only": validate_only,
        }
        response = await conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, fields)
        for result in response.responses:
            _raise_for(result.error_code, result.error_message, f"{resource.name!r}")

    # -- records and offsets -----------------------------------------------------------------
    @overload
    async def delete_records(
        self, offsets: Mapping[TopicPartition, int], *, partial: Literal[False] = ...
    ) -> dict[TopicPartition, int]: ...

    @overload
    async def delete_records(
        self, offsets: Mapping[TopicPartition, int], *, partial: Literal[True]
    ) -> dict[TopicPartition, int | KafkaError]: ...

    @overload
    async def delete_records(
        self, offsets: Mapping[TopicPartition, int], *, partial: bool
    ) -> dict[TopicPartition, int | KafkaError]: ...

    async def delete_records(
        self, offsets: Mapping[TopicPartition, int], *, partial: bool = False
    ) -> Mapping[TopicPartition, int | KafkaError]:
        """Delete records before the given offsets (-1: the high watermark).

        Returns each partition's new low watermark (log start offset). Raises the first
        partition's error, or with ``partial`` returns it as that partition's value.
        """

        async def call(conn: Connection, tps: list[TopicPartition]) -> dict[TopicPartition, Any]:
            by_topic: dict[str, list[dict[str, int]]] = defaultdict(list)
            for tp in tps:
                by_topic[tp.topic].append({"partition_index": tp.partition,
                                           "offset": offsets[tp]})
            fields = {"topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
                      "timeout_ms": self._timeout_ms}
            response = await conn.request(ApiKey.DELETE_RECORDS, fields)
            out: dict[TopicPartition, Any] = {}
            for topic in response.topics:
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, p.partition_index)
                    out[tp] = (error_for(p.error_code, f"deleting the records of {tp} "
                                                       f"before offset {offsets[tp]}")
                               if p.error_code else p.low_watermark)
            return out

        return await self.cluster.per_leader(offsets, call, timeout_s=self.request_timeout_s,
                                             partial=partial)

    @overload
    async def list_offsets(
        self, specs: Mapping[TopicPartition, int], *, isolation_level: int = ...,
        partial: Literal[False] = ...,
    ) -> dict[TopicPartition, OffsetAndTimestamp]: ...

    @overload
    async def list_offsets(
        self, specs: Mapping[TopicPartition, int], *, isolation_level: int = ...,
        partial: Literal[True],
    ) -> dict[TopicPartition, OffsetAndTimestamp | KafkaError]: ...

    @overload
    async def list_offsets(
        self, specs: Mapping[TopicPartition, int], *, isolation_level: int = ...,
        partial: bool,
    ) -> dict[TopicPartition, OffsetAndTimestamp | KafkaError]: ...

    async def list_offsets(
        self, specs: Mapping[TopicPartition, int], *, isolation_level: int = READ_UNCOMMITTED,
        partial: bool = False,
    ) -> Mapping[TopicPartition, OffsetAndTimestamp | KafkaError]:
        """Offsets by :class:`~strom.client.admin_types.OffsetSpec` sentinel or timestamp
        (``offset`` -1 when no record matches). Raises the first partition's error, or with
        ``partial`` returns it as that partition's value."""
        return await list_offsets(self.cluster, specs, isolation_level=isolation_level,
                                  timeout_s=self.request_timeout_s, partial=partial)

    # -- cluster -----------------------------------------------------------------------------
    async def describe_cluster(self) -> ClusterDescription:
        """Cluster id, controller and brokers (DescribeCluster, else Metadata)."""
        conn = await self.cluster.any_connection()
        if ApiKey.DESCRIBE_CLUSTER in conn.versions:
            response = await conn.request(ApiKey.DESCRIBE_CLUSTER,
                                          {"include_cluster_authorized_operations": False})
            _raise_for(response.error_code, response.error_message, "DescribeCluster")
            brokers = tuple(sorted(
                (BrokerNode(b.broker_id, b.host, b.port, b.rack) for b in response.brokers),
                key=lambda b: b.node_id,
            ))
            return ClusterDescription(response.cluster_id, response.controller_id, brokers)
        meta = await self.cluster.refresh([])
        return ClusterDescription(meta.cluster_id, meta.controller_id,
                                  tuple(sorted(meta.brokers.values(), key=lambda b: b.node_id)))

    async def describe_log_dirs(
        self,
        broker_ids: Iterable[int] | None = None,
        partitions: Iterable[TopicPartition] | None = None,
    ) -> dict[int, list[LogDirDescription]]:
        """Log dirs and the replicas in them, per broker (all brokers / partitions by default)."""
        meta = self.cluster.metadata if self.cluster.metadata.brokers else \
            await self.cluster.refresh(None)
        nodes = sorted(meta.brokers) if broker_ids is None else list(broker_ids)
        topics: list[dict[str, Any]] | None = None
        if partitions is not None:
            grouped: dict[str, list[int]] = defaultdict(list)
            for tp in partitions:
                grouped[tp.topic].append(tp.partition)
            topics = [{"topic": t, "partitions": ps} for t, ps in grouped.items()]
        out: dict[int, list[LogDirDescription]] = {}
        for node in nodes:
            conn = await self.cluster.connection(node)
            response = await conn.request(ApiKey.DESCRIBE_LOG_DIRS, {"topics": topics})
            _raise_for(getattr(response, "error_code", 0), None, f"DescribeLogDirs on {node}")
            out[node] = [
                LogDirDescription(
                    path=r.log_dir,
                    error_code=r.error_code,
                    replicas=tuple(
                        ReplicaInfo(t.name, p.partition_index, p.partition_size, p.offset_lag,
                                    p.is_future_key)
                        for t in r.topics for p in t.partitions
                    ),
                    total_bytes=getattr(r, "total_bytes", -1),
                    usable_bytes=getattr(r, "usable_bytes", -1),
                )
                for r in response.results
            ]
        return out

    async def describe_api_versions(self, broker_id: int) -> BrokerApiVersions:
        """The API version ranges broker ``broker_id`` advertises (its ApiVersions answer,
        exchanged when the connection opened) and the version this client uses for each."""
        conn = await self.cluster.connection(broker_id)
        node = self.cluster.metadata.brokers.get(broker_id) or \
            BrokerNode(broker_id, conn.host, conn.port)
        return BrokerApiVersions(node, dict(conn.broker_versions), dict(conn.versions))

    # -- consumer groups ---------------------------------------------------------------------
    async def find_coordinator(self, group_id: str) -> BrokerNode:
        """The broker coordinating ``group_id`` (FindCoordinator, cached)."""
        return await self.groups.find_coordinator(group_id)

    async def find_coordinators(self, group_ids: Iterable[str]) -> dict[str, BrokerNode]:
        """The coordinators of several groups (one batched FindCoordinator on v4+)."""
        return await self.groups.find_coordinators(group_ids)

    async def list_groups(self, states: Iterable[str] | None = None, *,
                          types: Iterable[str] | None = None) -> list[GroupListing]:
        """All groups of the cluster, sorted by id; only those in ``states`` / of ``types``
        when given (names as in :class:`~strom.client.admin_types.GroupState` /
        :class:`~strom.client.admin_types.GroupType`)."""
        return await self.groups.list_groups(states, types=types)

    async def describe_groups(self, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
        """State, protocol, members and their decoded subscriptions and assignments."""
        return await self.groups.describe_groups(group_ids)

    async def describe_group(self, group_id: str) -> GroupDescription:
        """One group (see :meth:`describe_groups`)."""
        return await self.groups.describe_group(group_id)

    async def list_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Committed offsets of a group (partitions without a commit are left out)."""
        return await self.groups.list_offsets(group_id, partitions)

    async def alter_consumer_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
    ) -> None:
        """Set a group's committed offsets; the group must have no active members."""
        await self.groups.alter_offsets(group_id, offsets)

    async def delete_consumer_groups(self, group_ids: Iterable[str]) -> None:
        """Delete empty groups with their offsets (GroupIdNotFoundError, NonEmptyGroupError)."""
        await self.groups.delete_groups(group_ids)

    async def delete_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> None:
        """Delete a group's committed offsets of partitions it is not subscribed to."""
        await self.groups.delete_offsets(group_id, partitions)

    # -- transactions (KIP-664) --------------------------------------------------------------
    @overload
    async def describe_producers(
        self, partitions: Iterable[TopicPartition], *, broker_id: int | None = ...,
        partial: Literal[False] = ...,
    ) -> dict[TopicPartition, list[ProducerState]]: ...

    @overload
    async def describe_producers(
        self, partitions: Iterable[TopicPartition], *, broker_id: int | None = ...,
        partial: bool,
    ) -> dict[TopicPartition, list[ProducerState] | KafkaError]: ...

    async def describe_producers(
        self, partitions: Iterable[TopicPartition], *, broker_id: int | None = None,
        partial: bool = False,
    ) -> Mapping[TopicPartition, list[ProducerState] | KafkaError]:
        """The active producers of each partition, from its leader (or from ``broker_id``);
        with ``partial`` a failed partition's error is its value instead of being raised."""
        return await self.transactions.describe_producers(partitions, broker_id=broker_id,
                                                          partial=partial)

    async def list_transactions(
        self, states: Iterable[str] | None = None, producer_ids: Iterable[int] | None = None,
        duration_ms: int | None = None,
    ) -> list[TransactionListing]:
        """Transactional ids of the whole cluster with their coordinator, filtered by state
        (:class:`~strom.client.admin_types.TransactionState` names), producer id and how
        long an Ongoing transaction has run."""
        return await self.transactions.list_transactions(states, producer_ids, duration_ms)

    async def describe_transactions(
        self, transactional_ids: Iterable[str]
    ) -> dict[str, TransactionDescription]:
        """State, producer, timeout, start time and partitions of each transactional id."""
        return await self.transactions.describe_transactions(transactional_ids)

    async def abort_transaction(self, spec: AbortTransactionSpec) -> None:
        """Abort a hanging transaction: write an ABORT marker for ``spec``'s producer to its
        partition (WriteTxnMarkers to the leader, as Kafka's Admin.abortTransaction)."""
        await self.transactions.abort_transaction(spec)

    # -- users (KIP-554) ------------------------------------------------------------------------
    async def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None
    ) -> list[UserScramCredentials]:
        """Each user's SCRAM mechanisms and iteration counts (every user when None)."""
        return await scram_admin.describe(self._to_controller, users)

    async def alter_user_scram_credentials(
        self, changes: Iterable[ScramUpsert | ScramDelete]
    ) -> None:
        """Create, replace or delete users' SCRAM credentials (salted on this side)."""
        await scram_admin.alter(self._to_controller, changes)

    # -- ACLs -----------------------------------------------------------------------------------
    async def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Store ACL bindings (CreateAcls; an existing one is left as it is)."""
        await acl_admin.create(await self.cluster.any_connection(), bindings)

    async def describe_acls(self, acl_filter: AclFilter | None = None) -> list[AclBinding]:
        """The stored ACL bindings ``acl_filter`` matches (every binding when None)."""
        return await acl_admin.describe(await self.cluster.any_connection(),
                                        acl_filter or AclFilter())

    async def delete_acls(self, filters: Iterable[AclFilter]) -> list[AclBinding]:
        """Delete the ACL bindings the filters match; the bindings deleted."""
        return await acl_admin.delete(await self.cluster.any_connection(), filters)

    # -- client quotas (KIP-546) ------------------------------------------------------------
    async def _to_any_broker(self, api_key: int, fields: dict[str, Any]) -> Any:
        conn = await self.cluster.any_connection()
        return await conn.request(api_key, fields)

    async def describe_client_quotas(
        self, components: Iterable[Component] = (), *, strict: bool = False
    ) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
        """The quotas of every entity matching the filter (all of them by default), keyed
        by the entity's (type, name) pairs sorted by type; a None name is the default."""
        return await quota_admin.describe(self._to_any_broker, components, strict)

    async def alter_client_quotas(self, alterations: Iterable[QuotaAlteration], *,
                                  validate_only: bool = False) -> None:
        """Set or remove (value None) quota keys of entities."""
        await quota_admin.alter(self._to_any_broker, alterations, validate_only)


def _config_entry(c: Any) -> ConfigEntry:
    synonyms = tuple(ConfigSynonym(s.name, s.value, s.source) for s in (c.synonyms or ()))
    return ConfigEntry(
        name=c.name,
        value=c.value,
        source=getattr(c, "config_source", -1),
        read_only=bool(c.read_only),
        sensitive=bool(c.is_sensitive),
        synonyms=synonyms,
        config_type=getattr(c, "config_type", 0) or 0,
        documentation=getattr(c, "documentation", None),
    )
