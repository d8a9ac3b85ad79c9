"""The cluster metadata image: an immutable snapshot of brokers, topics, partitions, the
dynamic broker configs, the users' SCRAM credentials, the ACLs and the client quotas.

Every change produces a new image with ``epoch`` + 1; readers hold an image and never see it
change under them. Handlers cache encoded per-topic metadata keyed by (topic, epoch).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from strom.common.acl import AccessControlEntry, ResourcePattern


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where one of a broker's listeners is reached (its advertised address)."""

    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A live broker. ``host`` / ``port`` are its inter-broker listener's address;
    ``endpoints`` every listener's (empty: the one listener at ``host`` / ``port``).
    ``epoch`` is its broker epoch: in ZooKeeper, the czxid of its registration znode (as
    Kafka's ZooKeeper mode), so it grows each time the broker registers again; -1 where
    registrations have none (the single-node store, brokers being registered)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: tuple[Endpoint, ...] = ()
    epoch: int = -1

    def address(self, listener: str | None) -> tuple[str, int] | None:
        """The address a client that came through ``listener`` is given (Kafka answers with
        the endpoints of the same listener name); None when this broker has no such
        listener. ``listener`` None, or a broker without named endpoints: ``host:port``."""
        if listener is None or not self.endpoints:
            return self.host, self.port
        for endpoint in self.endpoints:
            if endpoint.listener == listener:
                return endpoint.host, endpoint.port
        return None


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """A user's SCRAM credential for one mechanism (RFC 5802): never the password, only
    what the server needs to check a proof. Kafka's text form (its ``/config/users/<u>``
    value) is ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


#: A client-quota entity (Kafka's ``ClientQuotaEntity``): its (entity type, name) pairs sorted
#: by type, the types being ``"user"`` and ``"client-id"``, or ``"ip"`` alone (an IP address's
#: connection creation rate); a None name is that type's default entity (Kafka's
#: ``<default>``). ``(("client-id", None), ("user", "alice"))`` is the default client id of
#: user alice.
QuotaEntity = tuple[tuple[str, str | None], ...]


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition's assignment and state. While a reassignment (KIP-455) is in progress,
    ``replicas`` is the full set (target replicas first, then the original ones that are
    leaving), ``adding_replicas`` those not in the original set and ``removing_replicas``
    those not in the target; both are subsets of ``replicas`` and disjoint, and both are
    empty when no reassignment is in progress."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """Where the partition is going (``replicas`` when not reassigning)."""
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        """Where it was before the reassignment (``replicas`` when not reassigning)."""
        return tuple(r for r in self.replicas if r not in self.adding_replicas)


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic: its id, partitions and config overrides (raw strings as set by users)."""

    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionInfo, ...]
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """``broker_configs`` holds the dynamic broker configs (raw strings, as set by users) by
    resource name: ``""`` for the cluster-wide default, the broker id (``"1"``) for one broker;
    a resource without any is absent."""

    cluster_id: str
    epoch: int
    controller_id: int
    brokers: dict[int, BrokerInfo]
    topics: dict[str, TopicInfo]
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    #: user name → SCRAM mechanism name ("SCRAM-SHA-256") → credential.
    scram_credentials: dict[str, dict[str, ScramCredential]] = field(default_factory=dict)
    #: ACLs by resource pattern (a pattern without entries is absent).
    acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = field(default_factory=dict)
    #: client-quota entity → quota key ("producer_byte_rate") → value.
    client_quotas: dict[QuotaEntity, dict[str, float]] = field(default_factory=dict)

    #: topic id → topic, built on the first :meth:`topic_by_id` (never copied by
    #: ``dataclasses.replace``: each image builds its own).
    _by_id: dict[uuid.UUID, TopicInfo] | None = field(default=None, init=False, repr=False,
                                                      compare=False)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        """The topic with ``topic_id`` (None: no such topic), in constant time: a follower's
        fetch names every topic it follows by id, so a scan of the topics per name made each
        fetch cost topics² (issue 22). The index is built once per image: an image's dicts
        are not changed after it is published. A hit is still checked against ``topics``
        and the index rebuilt when the number of topics moved (tests build images by hand);
        a miss is answered from the index — rebuilding it on every miss cost a scan of all
        topics per unknown id (0.1-0.4 ms at 2,000 topics), and a follower that learns of
        new topics before their leader names them in every fetch until the leader does."""
        index = self._by_id
        if index is not None and len(index) == len(self.topics):
            found = index.get(topic_id)
            if found is None or self.topics.get(found.name) is found:
                return found
        index = {topic.topic_id: topic for topic in self.topics.values()}
        object.__setattr__(self, "_by_id", index)
        return index.get(topic_id)
