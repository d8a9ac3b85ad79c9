"""The znodes of a strom cluster in ZooKeeper (under the connect string's chroot) and their
JSON, modelled on the layout of Kafka's ZooKeeper mode:

===========================================  ==============================================
``/cluster/id``                              ``{"version":"1","id":"<cluster id>"}``
``/brokers/ids/<id>`` (ephemeral)            ``{"version":5,"host":h,"port":p,"endpoints":
                                             ["NAME://h:p",…],"listener_security_protocol_map":
                                             {"NAME":"PLAINTEXT",…},"rack":r|null,"jmx_port":-1,
                                             "features":{},"timestamp":"<ms>"}``; its
                                             czxid is the broker epoch
``/brokers/topics/<t>``                      ``{"version":3,"topic_id":"<Kafka base64 uuid>",
                                             "partitions":{"0":[replicas…]},"adding_replicas":{},
                                             "removing_replicas":{}}`` (+ ``"internal":true``);
                                             adding / removing list only the partitions
                                             being reassigned (``{"0":[4]}``), as Kafka
``/brokers/topics/<t>/partitions/<p>/state``  ``{"version":1,"leader":l,"leader_epoch":e,
                                             "isr":[…],"controller_epoch":c}``
``/config/topics/<t>``                       ``{"version":1,"config":{"k":"v"}}``
``/config/brokers/<id>`` or ``<default>``    ``{"version":1,"config":{"k":"v"}}``
``/config/users/<user>``                     ``{"version":1,"config":{"SCRAM-SHA-256":
                                             "salt=…,stored_key=…,server_key=…,iterations=n",
                                             "producer_byte_rate":"1024",…}}``: the user's
                                             SCRAM credentials *and* its client quotas
``/config/users/<user>/clients/<client-id>``  ``{"version":1,"config":{"consumer_byte_rate":
                                             "2048",…}}`` (quotas of a user + client id; the
                                             ``clients`` znode between is empty)
``/config/clients/<client-id>``              ``{"version":1,"config":{"request_percentage":
                                             "50.0",…}}``
``/config/ips/<ip>`` or ``<default>``        ``{"version":1,"config":{"connection_creation_rate":
                                             "10"}}`` (the address as given, unencoded)
``/controller`` (ephemeral)                  ``{"version":1,"brokerid":id,"timestamp":"<ms>"}``
``/controller_epoch``                        the epoch in decimal; its znode version fences
``/latest_producer_id_block``                ``{"version":1,"broker":id,"block_start":"<n>",
                                             "block_end":"<n>"}`` (both inclusive)
``/kafka-acl/<Type>/<name>`` (LITERAL),       ``{"version":1,"acls":[{"principal":"User:a",
``/kafka-acl-extended/prefixed/<Type>/<name>``  "host":"*","operation":"Read",
                                             "permissionType":"Allow"},…]}`` (Kafka's
                                             PascalCase names; ``/`` and ``%`` in a name are
                                             %-escaped, as a znode name cannot hold ``/``)
``/strom/metadata_epoch``                    its znode *version* is the metadata data
                                             version: every metadata write sets it with the
                                             version it read, in the same multi-op; its data
                                             says what the latest writes changed (below)
``/strom/metadata_deltas/<v>``               ``{"version":1,"data_version":v,"topics":{"<t>":
                                             {"topic":{…},"config":{…},"states":{"0":{…}}}
                                             |null}}``: what write ``v`` left in the znodes of
                                             each topic it changed (the three znodes' JSON as
                                             above; null: deleted); ``v`` zero-padded to 10
===========================================  ==============================================

The change hints in ``/strom/metadata_epoch``: ``{"version":1,"changes":[[v,other,[t…]],…]}``,
one entry per data version ``v`` (ascending, contiguous, the newest last): the topics whose
znodes that write touched, and ``other`` true when it touched anything else (broker configs,
users, client quotas, ACLs); ``null`` instead of the list when the write touched too many
topics to list. A reader whose image is at version ``k`` re-reads only the topics listed by the
entries after ``k`` when they reach back to ``k + 1``, and everything otherwise. Entries are
dropped, oldest first, to keep the data under :data:`CHANGE_HINT_BYTES`. Empty data (as older
strom versions write) lists nothing, so the next reader re-reads everything.

The topic deltas: the write that makes data version ``v`` also creates
``/strom/metadata_deltas/<v>`` in its multi-op, holding every topic it changed whole, unless
that is over :data:`DELTA_PARTITIONS` partitions or :data:`DELTA_BYTES`. A reader the hints
cover takes the changed topics from the deltas of the versions in between (one read a write,
where the znodes cost three reads a topic) and reads from their znodes only the topics of
writes without one. Only deltas of the latest :data:`DELTA_KEEP` versions are relied on;
every :data:`DELTA_KEEP`-th write deletes the older ones.

User and client-id names in znode names are Kafka's ``Sanitizer`` form (URL-encoded: every
character but ``A-Za-z0-9._-`` as ``%XX`` of its UTF-8 bytes, a space ``%20``); a default
entity (a None name in the image) is ``<default>``. Quota values are strings: the byte rates
(Kafka LONG configs) in decimal without a fraction, the others as Python's ``repr`` of the
float (``50.0``; Kafka reads both with ``toDouble``).

Pure functions only (bytes in, values out); the store does the I/O.
"""

from __future__ import annotations

import enum
import json
import time
import uuid
from collections.abc import Mapping
from typing import Any, TypeVar
from urllib.parse import quote, unquote

from strom.common.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strom.common.scram import format_credential, parse_credential
from strom.common.types import kafka_uuid, parse_kafka_uuid
from strom.metadata.image import (
    BrokerInfo,
    Endpoint,
    PartitionInfo,
    QuotaEntity,
    ScramCredential,
    TopicInfo,
)

CLUSTER_ID = "/cluster/id"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
TOPIC_CONFIGS = "/config/topics"
BROKER_CONFIGS = "/config/brokers"
USER_CONFIGS = "/config/users"
CLIENT_CONFIGS = "/config/clients"
IP_CONFIGS = "/config/ips"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
METADATA_EPOCH = "/strom/metadata_epoch"
METADATA_DELTAS = "/strom/metadata_deltas"
#: Where the ACLs of each pattern type live.
ACL_ROOTS = {PatternType.LITERAL: "/kafka-acl",
             PatternType.PREFIXED: "/kafka-acl-extended/prefixed"}
#: The resource types ACLs are stored for.
ACL_RESOURCE_TYPES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                      ResourceType.TRANSACTIONAL_ID, ResourceType.DELEGATION_TOKEN,
                      ResourceType.USER)
E = TypeVar("E", bound=enum.Enum)


def pascal(member: enum.Enum) -> str:
    """Kafka's name of an enum member in ZooKeeper: ``TRANSACTIONAL_ID`` → ``TransactionalId``."""
    return "".join(word.capitalize() for word in member.name.split("_"))


def from_pascal(kind: type[E], name: str) -> E:
    for member in kind:
        if pascal(member) == name:
            return member
    raise ValueError(f"unknown {kind.__name__} {name!r}")


def acl_type_path(pattern_type: PatternType, resource_type: ResourceType) -> str:
    return f"{ACL_ROOTS[pattern_type]}/{pascal(resource_type)}"


#: Persistent parents created when a store opens a fresh chroot.
PARENTS = (BROKER_IDS, TOPICS, TOPIC_CONFIGS, BROKER_CONFIGS, USER_CONFIGS, CLIENT_CONFIGS,
           IP_CONFIGS, "/cluster", METADATA_DELTAS,
           *(acl_type_path(p, t) for p in ACL_ROOTS for t in ACL_RESOURCE_TYPES))
DEFAULT_RESOURCE = "<default>"


def broker_path(node_id: int) -> str:
    return f"{BROKER_IDS}/{node_id}"


def topic_path(name: str) -> str:
    return f"{TOPICS}/{name}"


def partitions_path(name: str) -> str:
    return f"{TOPICS}/{name}/partitions"


def partition_path(name: str, partition: int) -> str:
    return f"{TOPICS}/{name}/partitions/{partition}"


def state_path(name: str, partition: int) -> str:
    return f"{TOPICS}/{name}/partitions/{partition}/state"


def topic_config_path(name: str) -> str:
    return f"{TOPIC_CONFIGS}/{name}"


def broker_config_path(resource: str) -> str:
    """``resource`` as in the image: ``""`` (cluster default, Kafka's ``<default>``) or an id."""
    return f"{BROKER_CONFIGS}/{resource or DEFAULT_RESOURCE}"


def acl_path(pattern: ResourcePattern) -> str:
    return (f"{acl_type_path(pattern.pattern_type, pattern.resource_type)}/"
            f"{quote(pattern.name, safe=_NAME_SAFE)}")


def acl_pattern(pattern_type: PatternType, type_znode: str, name_znode: str) -> ResourcePattern:
    return ResourcePattern(from_pascal(ResourceType, type_znode), unquote(name_znode),
                           pattern_type)


#: Every printable character but ``/`` and ``%`` stays as it is in an ACL znode's name.
_NAME_SAFE = "".join(chr(c) for c in range(0x20, 0x7f) if chr(c) not in "/%")


def encode_acls(entries: frozenset[AccessControlEntry]) -> bytes:
    return _dump({"version": 1, "acls": [
        {"principal": e.principal, "permissionType": pascal(e.permission),
         "operation": pascal(e.operation), "host": e.host} for e in sorted(entries)]})


def decode_acls(data: bytes) -> frozenset[AccessControlEntry]:
    return frozenset(
        AccessControlEntry(str(e["principal"]), str(e["host"]),
                           from_pascal(AclOperation, str(e["operation"])),
                           from_pascal(AclPermissionType, str(e["permissionType"])))
        for e in _load(data).get("acls", []))


def resource_of_znode(name: str) -> str:
    return "" if name == DEFAULT_RESOURCE else name


def _dump(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _load(data: bytes) -> dict[str, Any]:
    value = json.loads(data.decode())
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {data[:80]!r}")
    return value


def _now_ms() -> str:
    return str(int(time.time() * 1000))


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return str(_load(data)["id"])


def encode_broker(broker: BrokerInfo) -> bytes:
    """A broker without named endpoints is registered with one PLAINTEXT endpoint at
    ``host:port`` (and decoded back without endpoints)."""
    endpoints = broker.endpoints or (Endpoint("PLAINTEXT", broker.host, broker.port),)
    return _dump({
        "version": 5, "host": broker.host, "port": broker.port, "jmx_port": -1,
        "endpoints": [f"{e.listener}://{e.host}:{e.port}" for e in endpoints],
        "listener_security_protocol_map": {e.listener: e.security_protocol for e in endpoints},
        "rack": broker.rack, "features": {}, "timestamp": _now_ms(),
    })


def decode_broker(node_id: int, data: bytes, epoch: int = -1) -> BrokerInfo:
    """``epoch``: the registration znode's czxid (the broker epoch)."""
    value = _load(data)
    protocols: dict[str, str] = value.get("listener_security_protocol_map") or {}
    endpoints = []
    for url in value.get("endpoints", []):
        listener, _, address = str(url).partition("://")
        host, _, port_text = address.rpartition(":")
        endpoints.append(Endpoint(listener, host.strip("[]"), int(port_text),
                                  protocols.get(listener, "PLAINTEXT")))
    address, port = str(value["host"]), int(value["port"])
    if endpoints == [Endpoint("PLAINTEXT", address, port)]:
        endpoints = []
    return BrokerInfo(node_id, address, port, value.get("rack"), tuple(endpoints), epoch)


#: A partition's assignment in the topic znode: (replicas, adding, removing).
Assignment = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]


def encode_topic(topic_id: uuid.UUID, partitions: tuple[PartitionInfo, ...],
                 internal: bool) -> bytes:
    return _dump(_topic_value(topic_id, partitions, internal))


def _topic_value(topic_id: uuid.UUID, partitions: tuple[PartitionInfo, ...],
                 internal: bool) -> dict[str, Any]:
    value: dict[str, Any] = {
        "version": 3, "topic_id": kafka_uuid(topic_id),
        "partitions": {str(p.partition): list(p.replicas) for p in partitions},
        "adding_replicas": {str(p.partition): list(p.adding_replicas)
                            for p in partitions if p.adding_replicas},
        "removing_replicas": {str(p.partition): list(p.removing_replicas)
                              for p in partitions if p.removing_replicas},
    }
    if internal:
        value["internal"] = True
    return value


def decode_topic(data: bytes) -> tuple[uuid.UUID, dict[int, Assignment], bool]:
    """(topic id, assignment by partition, internal). Older znodes (version 1 / 2) have no
    ``adding_replicas`` / ``removing_replicas``: nothing is being reassigned."""
    return _topic_of(_load(data))


def _topic_of(value: dict[str, Any]) -> tuple[uuid.UUID, dict[int, Assignment], bool]:
    def ids(field: str, partition: str) -> tuple[int, ...]:
        return tuple(int(r) for r in (value.get(field) or {}).get(partition, ()))

    assignments = {int(p): (tuple(int(r) for r in rs), ids("adding_replicas", p),
                            ids("removing_replicas", p))
                   for p, rs in value["partitions"].items()}
    return parse_kafka_uuid(str(value["topic_id"])), assignments, bool(value.get("internal"))


def encode_state(p: PartitionInfo, controller_epoch: int) -> bytes:
    return _dump(_state_value(p, controller_epoch))


def _state_value(p: PartitionInfo, controller_epoch: int) -> dict[str, Any]:
    return {"version": 1, "leader": p.leader, "leader_epoch": p.leader_epoch,
            "isr": list(p.isr), "controller_epoch": controller_epoch}


def decode_state(partition: int, assignment: Assignment, data: bytes) -> PartitionInfo:
    return _state_of(partition, assignment, _load(data))


def _state_of(partition: int, assignment: Assignment, value: dict[str, Any]) -> PartitionInfo:
    replicas, adding, removing = assignment
    return PartitionInfo(partition, int(value["leader"]), int(value["leader_epoch"]), replicas,
                         tuple(int(r) for r in value["isr"]), adding, removing)


def encode_config(configs: Mapping[str, str]) -> bytes:
    return _dump(_config_value(configs))


def _config_value(configs: Mapping[str, str]) -> dict[str, Any]:
    return {"version": 1, "config": dict(configs)}


def decode_config(data: bytes) -> dict[str, str]:
    """Empty data (a parent znode Kafka created on the way to a child) holds no config."""
    if not data:
        return {}
    return _config_of(_load(data))


def _config_of(value: dict[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (value.get("config") or {}).items()}


def encode_scram(credential: ScramCredential) -> str:
    return format_credential(credential.salt, credential.stored_key, credential.server_key,
                             credential.iterations)


def decode_scram(text: str) -> ScramCredential:
    return ScramCredential(*parse_credential(text))


#: The client-quota keys a user / client-id znode may hold beside SCRAM credentials, and an
#: ip znode.
QUOTA_KEYS = frozenset({"producer_byte_rate", "consumer_byte_rate", "request_percentage",
                        "controller_mutation_rate"})
IP_QUOTA_KEYS = frozenset({"connection_creation_rate"})
#: The quota keys Kafka types LONG or INT: written without a fraction.
_INTEGER_QUOTA_KEYS = frozenset({"producer_byte_rate", "consumer_byte_rate",
                                 "connection_creation_rate"})


def sanitize(name: str | None) -> str:
    """A user or client-id name as a znode name (Kafka's ``Sanitizer``); None: ``<default>``."""
    if name is None:
        return DEFAULT_RESOURCE
    # quote() spares A-Za-z0-9._-~ like Java's URLEncoder (after Sanitizer's fix-ups) but "~"
    return quote(name, safe="").replace("~", "%7E")


def desanitize(znode: str) -> str | None:
    return None if znode == DEFAULT_RESOURCE else unquote(znode)


def user_config_path(user: str | None) -> str:
    return f"{USER_CONFIGS}/{sanitize(user)}"


def user_clients_path(user: str | None) -> str:
    """The (empty) parent of a user's per-client-id quota znodes."""
    return f"{user_config_path(user)}/clients"


def ip_config_path(ip: str | None) -> str:
    """An ip entity's znode: ``/config/ips/<address>`` (as Kafka wrote it: the address as
    given, only IP addresses being accepted) or ``/config/ips/<default>``."""
    return f"{IP_CONFIGS}/{DEFAULT_RESOURCE if ip is None else ip}"


def quota_entity_path(entity: QuotaEntity) -> str:
    """The znode of a client-quota entity (user, client id, or both; or an ip)."""
    names = dict(entity)
    if "ip" in names:
        return ip_config_path(names["ip"])
    if "user" not in names:
        return f"{CLIENT_CONFIGS}/{sanitize(names['client-id'])}"
    if "client-id" not in names:
        return user_config_path(names["user"])
    return f"{user_clients_path(names['user'])}/{sanitize(names['client-id'])}"


def encode_quota(key: str, value: float) -> str:
    if key in _INTEGER_QUOTA_KEYS and value.is_integer():
        return str(int(value))
    return repr(float(value))


def decode_quota(text: str) -> float:
    return float(text)


def encode_controller(broker_id: int) -> bytes:
    return _dump({"version": 1, "brokerid": broker_id, "timestamp": _now_ms()})


def decode_controller(data: bytes) -> int:
    return int(_load(data)["brokerid"])


def encode_producer_id_block(broker_id: int, first: int, last: int) -> bytes:
    return _dump({"version": 1, "broker": broker_id, "block_start": str(first),
                  "block_end": str(last)})


def decode_producer_id_block_end(data: bytes) -> int:
    """The last id of the block (inclusive)."""
    return int(_load(data)["block_end"])


#: The change hints' size bound (ZooKeeper's default request bound is 1 MB).
CHANGE_HINT_BYTES = 64 * 1024
#: One write's entry: its data version, whether non-topic znodes changed, the topics (None: too
#: many to list).
ChangeHint = tuple[int, bool, list[str] | None]


def encode_change_hints(previous: list[ChangeHint], version: int, other: bool,
                        topics: list[str]) -> tuple[bytes, list[ChangeHint]]:
    """The hints after a write of data ``version`` (``previous``: the hints of the version
    before it), trimmed to :data:`CHANGE_HINT_BYTES`; also returned decoded."""
    entry: ChangeHint = (version, other, sorted(topics))
    if sum(len(t) + 3 for t in topics) > CHANGE_HINT_BYTES // 2:
        entry = (version, other, None)
    hints = [h for h in previous if h[0] < version] + [entry]
    while True:
        data = _dump({"version": 1, "changes": [list(h) for h in hints]})
        if len(data) <= CHANGE_HINT_BYTES or len(hints) == 1:
            return data, hints
        hints = hints[len(hints) // 4 or 1:]


def decode_change_hints(data: bytes) -> list[ChangeHint]:
    """The hints in the epoch znode's data ([] when empty or unreadable)."""
    if not data:
        return []
    try:
        value = _load(data)
        return [(int(v), bool(o), None if t is None else [str(n) for n in t])
                for v, o, t in value.get("changes", [])]
    except (ValueError, TypeError, AttributeError):
        return []


def changed_since(hints: list[ChangeHint], known: int, version: int
                  ) -> tuple[set[str], bool] | None:
    """The topics changed (and whether anything else was) from data version ``known`` to
    ``version``, or None when the hints do not cover every write in between."""
    covered = [h for h in hints if known < h[0] <= version]
    if [h[0] for h in covered] != list(range(known + 1, version + 1)):
        return None
    topics: set[str] = set()
    other = False
    for _, changed_other, names in covered:
        if names is None:
            return None
        topics.update(names)
        other = other or changed_other
    return topics, other



#: ZooKeeper's bound on a request (its ``jute.maxbuffer``, 1 MiB by default) less a margin:
#: a larger multi-op is refused by closing the connection.
REQUEST_BYTES = 1_000_000
#: A metadata write's topic delta is written only up to this size and partition count, and
#: only when the multi-op with it stays within :data:`REQUEST_BYTES`; other writes' readers
#: read the znodes.
DELTA_BYTES = 256 * 1024
DELTA_PARTITIONS = 2_000
#: Deltas of the latest this-many data versions are kept; older ones are deleted.
DELTA_KEEP = 32


def delta_path(version: int) -> str:
    """The topic delta of the write that made data ``version`` (zero-padded: names sort)."""
    return f"{METADATA_DELTAS}/{version:010d}"


def encode_delta(version: int, topics: Mapping[str, TopicInfo | None],
                 controller_epoch: int) -> bytes | None:
    """The delta of the write that made data ``version``: every topic it changed, whole (None
    for a deleted topic), as the znodes hold it; None when over the bounds."""
    if sum(len(t.partitions) for t in topics.values() if t is not None) > DELTA_PARTITIONS:
        return None
    data = _dump({"version": 1, "data_version": version, "topics": {
        name: None if t is None else {
            "topic": _topic_value(t.topic_id, t.partitions, t.internal),
            "config": _config_value(t.configs),
            "states": {str(p.partition): _state_value(p, controller_epoch)
                       for p in t.partitions}}
        for name, t in topics.items()}})
    return data if len(data) <= DELTA_BYTES else None


def decode_delta(data: bytes, version: int) -> dict[str, TopicInfo | None] | None:
    """The topics a delta names, as reading their znodes would give them (None for a topic
    deleted); None when ``data`` is not the delta of data ``version``."""
    try:
        value = _load(data)
        if value.get("data_version") != version:
            return None
        topics: dict[str, TopicInfo | None] = {}
        for name, entry in value["topics"].items():
            if entry is None:
                topics[name] = None
                continue
            topic_id, assignment, internal = _topic_of(entry["topic"])
            states = entry["states"]
            topics[name] = TopicInfo(
                name, topic_id,
                tuple(_state_of(p, assignment[p], states[str(p)]) for p in sorted(assignment)),
                _config_of(entry["config"]), internal)
        return topics
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
