"""The API version ranges strom supports: the single source of the ApiVersions response.

Advertise a coherent set (librdkafka picks the record format from the whole set: Fetch ≥ 4 with
Produce ≥ 3 means record batch v2), and never advertise an API that is only stubbed — clients
will use it. Minimums follow Kafka 4 (KIP-896 dropped pre-2.1 versions), with Kafka 4.1's two
exceptions for librdkafka older than 2.11.1:

* **Produce is advertised from v0 but served from v3** (KAFKA-18659): those librdkafka
  releases enable gzip / snappy / lz4 only when the broker lists Produce v0 (and v2), and
  otherwise store every batch uncompressed without a word. A Produce v0-2 request closes the
  connection, as an unsupported version does on Kafka (:data:`ADVERTISED` against
  :data:`SUPPORTED`).
* **JoinGroup is served from v0 again** (KAFKA-19444): they enable the balanced consumer
  from JoinGroup v0 with SASL/GSSAPI, and some clients (kafka-go) join with v1.

``flexible_from`` says from which version an API uses flexible encoding (compact types and
tagged fields), which also selects request header v2 / response header v1. It is read from
kafka-python's JSON schemas, so it covers every API key, supported or not.
"""

from __future__ import annotations

import enum
from functools import cache


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    LIST_CONFIG_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75


# api key -> (min version, max version) that the broker serves.
SUPPORTED: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 13),
    ApiKey.FETCH: (4, 18),
    ApiKey.LIST_OFFSETS: (1, 11),
    ApiKey.METADATA: (0, 13),
    ApiKey.CONTROLLED_SHUTDOWN: (1, 3),
    ApiKey.OFFSET_COMMIT: (2, 10),
    ApiKey.OFFSET_FETCH: (1, 10),
    ApiKey.FIND_COORDINATOR: (0, 5),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 6),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 5),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 4),
    ApiKey.WRITE_TXN_MARKERS: (1, 1),
    ApiKey.TXN_OFFSET_COMMIT: (0, 4),
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 5),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.DESCRIBE_CLUSTER: (0, 2),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 2),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    ApiKey.LIST_CONFIG_RESOURCES: (0, 1),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, 0),
}

#: Feature flags (KIP-584) in ApiVersions v3+: name -> (min, max) level this broker supports,
#: and name -> the level finalized for the cluster. strom's are fixed by its code: the
#: KIP-848 consumer protocol (``group.version`` 1). Features strom does not have
#: (``transaction.version`` 2, ``share.version``, ``streams.version``, KRaft's
#: ``metadata.version`` / ``kraft.version``, ELR) are not listed, so clients keep their
#: level-0 paths (Java 4.x producers stay on transactions V1).
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {"group.version": (0, 1)}
FINALIZED_FEATURES: dict[str, int] = {"group.version": 1}
#: Kafka's FinalizedFeaturesEpoch is the metadata offset of the last feature change;
#: strom's features never change, so one epoch (>= 0: the finalized list is valid).
FINALIZED_FEATURES_EPOCH = 0

#: Where the ApiVersions response lists a lower minimum than :data:`SUPPORTED` serves:
#: api key -> the minimum listed. Only Produce, as Kafka (``ApiKeys.
#: PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION``); see the module doc.
_ADVERTISED_MIN: dict[int, int] = {ApiKey.PRODUCE: 0}

#: Served but not listed: ControlledShutdown, which strom's brokers send their controller at
#: a fixed version (ZooKeeper-era Kafka's protocol; Kafka 4.x, KRaft only, no longer lists
#: it), and no client uses.
_UNLISTED = frozenset({ApiKey.CONTROLLED_SHUTDOWN})

#: api key -> (min, max) listed in ApiVersions responses (and in the v0 answer to an
#: ApiVersions request above our range): :data:`SUPPORTED` with :data:`_ADVERTISED_MIN`,
#: without :data:`_UNLISTED`.
ADVERTISED: dict[int, tuple[int, int]] = {
    key: (_ADVERTISED_MIN.get(key, low), high) for key, (low, high) in SUPPORTED.items()
    if key not in _UNLISTED}


@cache
def _request_schema(api_key: int) -> dict[str, object] | None:
    """kafka-python's JSON schema of ``api_key``'s request, with its message class."""
    from kafka.protocol.api_message import ApiMessage

    for cls in _all_subclasses(ApiMessage):
        json = getattr(cls, "_json", None)
        if json and json.get("type") == "request" and json.get("apiKey") == api_key:
            return {"json": json, "class": cls}
    return None


#: APIs kafka-python has no schema for (hand-written codecs): their first flexible version.
_FLEXIBLE_WITHOUT_SCHEMA: dict[int, int] = {ApiKey.CONTROLLED_SHUTDOWN: 3}
#: Supported APIs with a hand-written codec instead of kafka-python's adapter.
HAND_WRITTEN = frozenset(_FLEXIBLE_WITHOUT_SCHEMA)
_NAMES_WITHOUT_SCHEMA: dict[int, str] = {ApiKey.CONTROLLED_SHUTDOWN: "ControlledShutdown"}


@cache
def flexible_from(api_key: int) -> int | None:
    """The first flexible version of ``api_key``, or None if it never is (or is unknown)."""
    schema = _request_schema(api_key)
    if schema is None:
        return _FLEXIBLE_WITHOUT_SCHEMA.get(api_key)
    versions = getattr(schema["class"], "_flexible_versions", None)
    # "flexibleVersions": "none" is (-1, -1) in kafka-python (OffsetDelete).
    return None if versions is None or versions[0] < 0 else int(versions[0])


def api_name(api_key: int) -> str | None:
    """Kafka's name of ``api_key`` ("Produce", "DescribeCluster"), from the same schemas, so
    it also names APIs strom does not serve; None for a key the schemas do not know."""
    schema = _request_schema(api_key)
    if schema is None:
        return _NAMES_WITHOUT_SCHEMA.get(api_key)
    json = schema["json"]
    assert isinstance(json, dict)
    return str(json["name"]).removesuffix("Request")


def _all_subclasses(cls: type) -> list[type]:
    _import_all_messages()
    out: list[type] = []
    stack: list[type] = [cls]
    while stack:
        subclasses: list[type] = stack.pop().__subclasses__()
        out.extend(subclasses)
        stack.extend(subclasses)
    return out


@cache
def _import_all_messages() -> None:
    import kafka.protocol.admin
    import kafka.protocol.consumer
    import kafka.protocol.metadata
    import kafka.protocol.producer
    import kafka.protocol.sasl  # noqa: F401

    import strom.protocol.schemas  # noqa: F401  (APIs kafka-python has no schema for)


def is_flexible(api_key: int, version: int) -> bool:
    first = flexible_from(api_key)
    return first is not None and version >= first


def request_header_version(api_key: int, version: int) -> int:
    return 2 if is_flexible(api_key, version) else 1


def response_header_version(api_key: int, version: int) -> int:
    """ApiVersions responses always use header v0 so any client can parse them (KIP-511)."""
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if is_flexible(api_key, version) else 0
