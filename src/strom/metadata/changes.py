"""Metadata changes: the only way a :class:`MetadataImage` moves on, and how one is applied.

Each change touches one topic (or one broker config resource), and maps onto the ZooKeeper
layout Kafka uses, so a ZooKeeper store can write a change as one multi-op:

=================  ===================================================================
``PutTopic``       ``/brokers/topics/<t>`` (topic id + assignment), one
                   ``/brokers/topics/<t>/partitions/<p>/state`` per partition (leader,
                   leader epoch, ISR) and ``/config/topics/<t>`` (overrides)
``RemoveTopic``    delete the same znodes
``SetTopicConfigs``  ``/config/topics/<t>``
``SetPartitions``  ``/brokers/topics/<t>`` (the assignment, when replicas change or partitions
                   are added) and the state znode of each listed partition
``SetBrokerConfigs``  ``/config/brokers/<id>`` or ``/config/brokers/<default>`` (dynamic
                   broker configs; an empty set deletes the znode)
``SetScramCredential``  one mechanism's entry of ``/config/users/<user>`` (None deletes it)
``SetAcls``        ``/kafka-acl/<type>/<name>`` (LITERAL) or
                   ``/kafka-acl-extended/prefixed/<type>/<name>`` (PREFIXED): every ACL of
                   one resource pattern (an empty set deletes the znode)
``SetClientQuota``  one key of ``/config/users/<u>[/clients/<c>]`` or ``/config/clients/<c>``
                   (``<default>`` for a default name; None deletes the key)
=================  ===================================================================

:func:`apply_changes` is pure: it checks each change against the image (as it stands after the
changes before it) and returns a new image with ``epoch + 1``; the input image is never
modified. Business rules (names, defaults, configs, placement) belong to the controller; this
module only keeps the image well-formed:

* an ACL is well-formed (:func:`strom.common.acl.binding_problem`);
* a client-quota entity names ``user`` and / or ``client-id``, each once, sorted by type;
* a broker config resource is ``""`` (the cluster-wide default) or a broker id in decimal;
* a topic has partitions ``0..N-1`` (N >= 1) and never loses one (Kafka cannot shrink a topic);
* each partition has a non-empty replica list without duplicates, an ISR that is a subset of
  its replicas, a leader that is in the ISR (or -1: no leader), and a leader epoch >= 0 that
  never goes down; adding / removing replicas (a reassignment) are disjoint subsets of its
  replicas.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from strom.common.acl import AccessControlEntry, AclBinding, ResourcePattern, binding_problem
from strom.common.errors import StromError
from strom.common.slices import Steps, run_at_once
from strom.metadata.image import (
    MetadataImage,
    PartitionInfo,
    QuotaEntity,
    ScramCredential,
    TopicInfo,
)

NO_LEADER = -1


class InvalidMetadataChangeError(StromError):
    """A change would leave the image malformed (a bug in the caller, not a user error)."""


@dataclass(frozen=True, slots=True)
class PutTopic:
    """Create ``topic`` whole, or replace the topic with the same name *and* id.

    A different topic of the same name must be removed first (topic ids are never reused)."""

    topic: TopicInfo


@dataclass(frozen=True, slots=True)
class RemoveTopic:
    """Delete a topic: its assignment, partition states and config overrides."""

    name: str


@dataclass(frozen=True, slots=True)
class SetTopicConfigs:
    """Replace a topic's config overrides (raw strings, as users set them) with ``configs``."""

    name: str
    configs: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class SetPartitions:
    """Set the listed partitions of ``topic``: existing ones are replaced (reassignment, new
    leader / epoch / ISR), the others are added; afterwards they must still be ``0..N-1``."""

    topic: str
    partitions: tuple[PartitionInfo, ...]


@dataclass(frozen=True, slots=True)
class SetBrokerConfigs:
    """Replace the dynamic configs of a broker (``resource`` = its id, ``"1"``) or of the
    cluster-wide default (``resource`` = ``""``) with ``configs`` (raw strings)."""

    resource: str
    configs: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class SetScramCredential:
    """Set (or, with ``credential`` None, delete) ``user``'s credential for ``mechanism``."""

    user: str
    mechanism: str
    credential: ScramCredential | None


@dataclass(frozen=True, slots=True)
class SetAcls:
    """Replace the ACLs of one resource pattern with ``entries`` (empty: remove them all)."""

    pattern: ResourcePattern
    entries: frozenset[AccessControlEntry]


@dataclass(frozen=True, slots=True)
class SetClientQuota:
    """Set (or, with ``value`` None, delete) quota ``key`` of a client-quota ``entity``."""

    entity: QuotaEntity
    key: str
    value: float | None


QUOTA_ENTITY_TYPES = ("client-id", "ip", "user")

MetadataChange: TypeAlias = (
    PutTopic | RemoveTopic | SetTopicConfigs | SetPartitions | SetBrokerConfigs
    | SetScramCredential | SetAcls | SetClientQuota)


def apply_changes(image: MetadataImage, changes: Sequence[MetadataChange]) -> MetadataImage:
    """The image after ``changes`` (all of them, in order), with ``epoch + 1``.

    Raises :class:`InvalidMetadataChangeError` and leaves ``image`` as it was if any change
    does not apply."""
    return run_at_once(apply_changes_steps(image, changes))


def apply_changes_steps(image: MetadataImage, changes: Sequence[MetadataChange]
                        ) -> Steps[MetadataImage]:
    """:func:`apply_changes` as steps (:mod:`strom.common.slices`): one per change."""
    topics = dict(image.topics)
    broker_configs = dict(image.broker_configs)
    scram = dict(image.scram_credentials)
    acls = dict(image.acls)
    quotas = dict(image.client_quotas)
    for change in changes:
        if isinstance(change, SetAcls):
            _set_acls(acls, change)
        elif isinstance(change, SetClientQuota):
            _set_quota(quotas, change)
        elif isinstance(change, SetScramCredential):
            if not change.user:
                raise InvalidMetadataChangeError("a SCRAM credential needs a user name")
            users = dict(scram.get(change.user, {}))
            if change.credential is None:
                users.pop(change.mechanism, None)
            else:
                users[change.mechanism] = change.credential
            if users:
                scram[change.user] = users
            else:
                scram.pop(change.user, None)
        elif isinstance(change, SetBrokerConfigs):
            resource = change.resource
            if resource and not (resource.isascii() and resource.isdigit()):
                raise InvalidMetadataChangeError(
                    f"broker config resource {resource!r} is neither '' nor a broker id")
            if change.configs:
                broker_configs[resource] = dict(change.configs)
            else:
                broker_configs.pop(resource, None)
        elif isinstance(change, PutTopic):
            new = change.topic
            old = topics.get(new.name)
            if old is not None and old.topic_id != new.topic_id:
                raise InvalidMetadataChangeError(
                    f"topic {new.name!r} exists with another id; remove it first")
            topics[new.name] = _checked_topic(new, old)
        elif isinstance(change, RemoveTopic):
            _existing(topics, change.name)
            del topics[change.name]
        elif isinstance(change, SetTopicConfigs):
            old = _existing(topics, change.name)
            topics[old.name] = dataclasses.replace(old, configs=dict(change.configs))
        elif isinstance(change, SetPartitions):
            old = _existing(topics, change.topic)
            merged = {p.partition: p for p in old.partitions}
            for p in change.partitions:
                merged[p.partition] = p
            parts = tuple(merged[i] for i in sorted(merged))
            topics[old.name] = _checked_topic(dataclasses.replace(old, partitions=parts), old)
        else:  # pragma: no cover - the union is closed
            raise InvalidMetadataChangeError(f"unknown metadata change {change!r}")
        yield
    return dataclasses.replace(image, epoch=image.epoch + 1, topics=topics,
                               broker_configs=broker_configs, scram_credentials=scram,
                               acls=acls, client_quotas=quotas)


def _set_acls(acls: dict[ResourcePattern, frozenset[AccessControlEntry]],
              change: SetAcls) -> None:
    for entry in change.entries:
        problem = binding_problem(AclBinding(change.pattern, entry))
        if problem is not None:
            raise InvalidMetadataChangeError(f"ACL {entry} on {change.pattern}: {problem}")
    if change.entries:
        acls[change.pattern] = frozenset(change.entries)
    else:
        acls.pop(change.pattern, None)


def _set_quota(quotas: dict[QuotaEntity, dict[str, float]], change: SetClientQuota) -> None:
    entity = change.entity
    types = [t for t, _ in entity]
    if (not types or types != sorted(set(types)) or not set(types) <= set(QUOTA_ENTITY_TYPES)
            or ("ip" in types and len(types) > 1)):
        raise InvalidMetadataChangeError(f"malformed client-quota entity {entity!r}")
    values = dict(quotas.get(entity, {}))
    if change.value is None:
        values.pop(change.key, None)
    else:
        values[change.key] = float(change.value)
    if values:
        quotas[entity] = values
    else:
        quotas.pop(entity, None)


def _existing(topics: Mapping[str, TopicInfo], name: str) -> TopicInfo:
    topic = topics.get(name)
    if topic is None:
        raise InvalidMetadataChangeError(f"topic {name!r} does not exist")
    return topic


def _checked_topic(topic: TopicInfo, old: TopicInfo | None) -> TopicInfo:
    """``topic`` with its configs copied, after checking the invariants in the module doc."""
    name = topic.name
    if not name:
        raise InvalidMetadataChangeError("a topic needs a name")
    if not topic.partitions:
        raise InvalidMetadataChangeError(f"topic {name!r} needs at least one partition")
    numbers = [p.partition for p in topic.partitions]
    if numbers != list(range(len(numbers))):
        raise InvalidMetadataChangeError(
            f"topic {name!r}: partitions must be numbered 0..N-1 in order, got {numbers}")
    before = {p.partition: p for p in old.partitions} if old is not None else {}
    if len(numbers) < len(before):
        raise InvalidMetadataChangeError(f"topic {name!r}: partitions cannot be removed")
    for p in topic.partitions:
        _check_partition(name, p, before.get(p.partition))
    return dataclasses.replace(topic, configs=dict(topic.configs))


def _check_partition(topic: str, p: PartitionInfo, old: PartitionInfo | None) -> None:
    where = f"{topic}-{p.partition}"
    if not p.replicas or len(set(p.replicas)) != len(p.replicas):
        raise InvalidMetadataChangeError(
            f"{where}: replicas must be non-empty and distinct, got {list(p.replicas)}")
    if not set(p.isr) <= set(p.replicas) or len(set(p.isr)) != len(p.isr):
        raise InvalidMetadataChangeError(
            f"{where}: ISR {list(p.isr)} must be distinct replicas of {list(p.replicas)}")
    if (not set(p.adding_replicas) | set(p.removing_replicas) <= set(p.replicas)
            or set(p.adding_replicas) & set(p.removing_replicas)):
        raise InvalidMetadataChangeError(
            f"{where}: adding {list(p.adding_replicas)} / removing {list(p.removing_replicas)}"
            f" must be disjoint subsets of the replicas {list(p.replicas)}")
    if p.leader != NO_LEADER and p.leader not in p.isr:
        raise InvalidMetadataChangeError(f"{where}: leader {p.leader} is not in the ISR")
    if p.leader_epoch < 0 or (old is not None and p.leader_epoch < old.leader_epoch):
        raise InvalidMetadataChangeError(
            f"{where}: leader epoch {p.leader_epoch} is negative or went down")
