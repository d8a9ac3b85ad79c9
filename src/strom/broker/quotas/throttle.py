"""Where a throttle time goes in a response, and how the client learns it (KIP-219).

``throttle_time_ms`` sits at a fixed offset of the response body for every API strom
serves except Produce (last field; the Produce handler encodes it) and ApiVersions (after
the api keys): :func:`throttle_offset` finds it from the API's JSON schema — the fixed-size
fields before it — and :func:`with_throttle` writes it into an encoded body.

Since KIP-219 the broker answers at once and the *client* waits out the throttle time; the
broker mutes the connection for the same time, so a client that does not wait gains
nothing. Versions older than that expect the broker to hold the response back for the
throttle time instead (:func:`client_throttles`, Kafka 4.4's ``shouldClientThrottle``).
"""

from __future__ import annotations

import struct
from functools import cache

from strom.common.errors import UnsupportedVersionError
from strom.protocol import api
from strom.protocol.fast import ResponsePart
from strom.protocol.versions import ApiKey

_FIXED = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "bool": 1, "float64": 8, "uuid": 16,
          "uint16": 2, "uint32": 4}
_INT32 = struct.Struct(">i")

#: The first version of each API whose client waits out the throttle time itself, where
#: Kafka 4.4's response class says so (its ``shouldClientThrottle`` overrides, read from
#: kafka-clients 4.4.0). Any other API's client throttles itself in the versions whose
#: response has a ``throttle_time_ms`` (the base class's rule in 4.4 — in 3.x it was
#: never): DescribeCluster, DescribeProducers, ListTransactions, the client-quota APIs,
#: OffsetForLeaderEpoch v2+, …; not SASL nor WriteTxnMarkers, which have none.
CLIENT_THROTTLES_FROM: dict[int, int] = {
    ApiKey.PRODUCE: 6, ApiKey.FETCH: 8, ApiKey.LIST_OFFSETS: 3, ApiKey.METADATA: 6,
    ApiKey.OFFSET_COMMIT: 4, ApiKey.OFFSET_FETCH: 4, ApiKey.FIND_COORDINATOR: 2,
    ApiKey.JOIN_GROUP: 3, ApiKey.HEARTBEAT: 2, ApiKey.LEAVE_GROUP: 2, ApiKey.SYNC_GROUP: 2,
    ApiKey.DESCRIBE_GROUPS: 2, ApiKey.LIST_GROUPS: 2, ApiKey.API_VERSIONS: 2,
    ApiKey.CREATE_TOPICS: 3, ApiKey.DELETE_TOPICS: 2, ApiKey.DELETE_RECORDS: 1,
    ApiKey.INIT_PRODUCER_ID: 1, ApiKey.ADD_PARTITIONS_TO_TXN: 1, ApiKey.ADD_OFFSETS_TO_TXN: 1,
    ApiKey.END_TXN: 1, ApiKey.TXN_OFFSET_COMMIT: 1, ApiKey.DESCRIBE_CONFIGS: 2,
    ApiKey.ALTER_CONFIGS: 1, ApiKey.DESCRIBE_LOG_DIRS: 1, ApiKey.CREATE_PARTITIONS: 1,
    ApiKey.DELETE_GROUPS: 1, ApiKey.INCREMENTAL_ALTER_CONFIGS: 0, ApiKey.OFFSET_DELETE: 0,
    ApiKey.DESCRIBE_ACLS: 1, ApiKey.CREATE_ACLS: 1, ApiKey.DELETE_ACLS: 1,
}


@cache
def client_throttles(api_key: int, version: int) -> bool:
    first = CLIENT_THROTTLES_FROM.get(api_key)
    if first is not None:
        return version >= first
    return has_throttle_time(api_key, version)


@cache
def has_throttle_time(api_key: int, version: int) -> bool:
    """Whether the API's response has a ``throttle_time_ms`` in ``version`` (False for the
    hand-written ones kafka-python has no schema for)."""
    try:
        fields = api.response_class(api_key)._json["fields"]
    except UnsupportedVersionError:  # no schema: ControlledShutdown
        return False
    return any(spec["name"] == "ThrottleTimeMs" and _in(spec.get("versions", "0+"), version)
               for spec in fields)


def _in(versions: str, version: int) -> bool:
    if versions == "none":
        return False
    if versions.endswith("+"):
        return version >= int(versions[:-1])
    low, _, high = versions.partition("-")
    return int(low) <= version <= int(high or low)


@cache
def throttle_offset(api_key: int, version: int) -> int | None:
    """The byte offset of ``throttle_time_ms`` in the response body, or None when the
    version has none or it follows a variable-size field."""
    offset = 0
    for spec in api.response_class(api_key)._json["fields"]:
        if not _in(spec.get("versions", "0+"), version):
            continue
        if spec["name"] == "ThrottleTimeMs":
            return offset
        size = _FIXED.get(spec["type"])
        if size is None:
            return None
        offset += size
    return None


def with_throttle(api_key: int, version: int, body: list[ResponsePart],
                  throttle_ms: int) -> list[ResponsePart]:
    """``body`` with its ``throttle_time_ms`` set (unchanged when it has no such field)."""
    offset = throttle_offset(api_key, version)
    if offset is None or not body:
        return body
    first = body[0]
    if not isinstance(first, bytes | bytearray | memoryview) or len(first) < offset + 4:
        return body
    patched = bytearray(first)
    _INT32.pack_into(patched, offset, min(throttle_ms, 2**31 - 1))
    return [bytes(patched), *body[1:]]
