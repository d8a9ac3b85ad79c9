"""The client side of framing (sans-io): request headers out, response headers in.

Request header (see :mod:`strom.protocol.frame` for the broker side)::

    v1: api_key int16, api_version int16, correlation_id int32, client_id nullable string
    v2: v1 + an empty tagged-field section (client_id stays a non-compact string)

Response header: ``correlation_id int32``, plus a tagged-field section in v1. Which version an
exchange uses follows from the API's flexible versions (``strom.protocol.versions``); the
ApiVersions response always uses v0.

Also here: the API version ranges this client speaks, and how a client picks one version per
API from the broker's ApiVersions answer.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from strom.common.errors import UnsupportedVersionError
from strom.protocol.frame import skip_tagged_fields
from strom.protocol.versions import ApiKey, request_header_version, response_header_version

_SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")

# Group API keys missing from strom.protocol.versions.ApiKey (the broker does not serve them
# yet); plain numbers here so the client does not depend on that enum growing.
DELETE_GROUPS = 42
OFFSET_DELETE = 47
_EXTRA_NAMES = {DELETE_GROUPS: "DeleteGroups", OFFSET_DELETE: "OffsetDelete"}

# api key -> (min, max) versions this client can build and parse. Produce v13 / Fetch v13+
# address topics by id (KIP-516), which this client does not do, so Fetch stops at 12; Produce
# v12 means transactions V2 (KIP-890) to a broker with transaction.version 2, and this
# client's transactions are V1, so Produce stops at 11, as Java's producer does without V2.
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 11),
    ApiKey.FETCH: (4, 12),
    ApiKey.LIST_OFFSETS: (1, 10),
    ApiKey.METADATA: (1, 12),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 5),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    # Consumer-group admin. OffsetCommit / OffsetFetch v10 address topics by id (KIP-848).
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.DESCRIBE_GROUPS: (0, 6),
    ApiKey.LIST_GROUPS: (0, 5),
    # The classic group protocol of the consumer (JoinGroup v4+: KIP-394 member ids; v5+:
    # static membership).
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    # The consumer protocol (KIP-848): v1, members name themselves (KIP-1082).
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (1, 1),
    DELETE_GROUPS: (0, 2),
    OFFSET_DELETE: (0, 0),
    # Transactions. AddPartitionsToTxn v4+ is broker-to-broker (KIP-890); EndTxn and
    # TxnOffsetCommit v5 belong to transaction version 2 (an epoch bump per transaction).
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 4),
    ApiKey.TXN_OFFSET_COMMIT: (0, 4),
    ApiKey.WRITE_TXN_MARKERS: (1, 1),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    # SASL (strom.client.sasl): the v1 handshake, then tokens in SaslAuthenticate.
    ApiKey.SASL_HANDSHAKE: (1, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    # Partition administration (strom.client.partition_admin), sent to the controller.
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
}


def api_name(api_key: int) -> str:
    """A readable API name for messages (``"CreateTopics"``), or ``"ApiKey(n)"``."""
    try:
        return "".join(part.capitalize() for part in ApiKey(api_key).name.split("_"))
    except ValueError:
        return _EXTRA_NAMES.get(api_key, f"ApiKey({api_key})")


def encode_request_header(
    api_key: int, version: int, correlation_id: int, client_id: str | None
) -> bytes:
    """The request header for ``api_key`` at ``version`` (v1 or v2 as the API requires)."""
    head = _HEADER_FIXED.pack(api_key, version, correlation_id)
    if client_id is None:
        head += _INT16.pack(-1)
    else:
        raw = client_id.encode("utf-8")
        head += _INT16.pack(len(raw)) + raw
    if request_header_version(api_key, version) >= 2:
        head += b"\x00"
    return head


def frame(header: bytes, body: bytes | bytearray | memoryview) -> list[bytes | memoryview]:
    """The pieces of one size-prefixed frame, ready for ``writelines`` (the body is not copied)."""
    return [_SIZE.pack(len(header) + len(body)) + header, memoryview(body)]


def read_correlation_id(frame_bytes: bytes | memoryview) -> int:
    """The correlation id at the start of every response frame."""
    return int(_SIZE.unpack_from(frame_bytes, 0)[0])


def response_body(frame_bytes: memoryview, api_key: int, version: int) -> memoryview:
    """The response body after its header (v0: correlation id; v1: plus tagged fields)."""
    if response_header_version(api_key, version) >= 1:
        return frame_bytes[skip_tagged_fields(frame_bytes, 4) :]
    return frame_bytes[4:]


def negotiate(broker: Mapping[int, tuple[int, int]]) -> dict[int, int]:
    """The version to use per API: the highest both sides speak; APIs without overlap are left out.

    ``broker`` maps api key to the (min, max) range from the broker's ApiVersions response.
    """
    chosen: dict[int, int] = {}
    for key, (low, high) in CLIENT_VERSIONS.items():
        theirs = broker.get(key)
        if theirs is None:
            continue
        top = min(high, theirs[1])
        if top >= max(low, theirs[0]):
            chosen[key] = top
    return chosen


def pick_version(
    versions: Mapping[int, int], api_key: int, broker: str, *, minimum: int | None = None
) -> int:
    """The negotiated version for ``api_key``; UnsupportedVersionError if there is none.

    ``minimum`` asks for at least that version (a feature that needs a newer request).
    """
    version = versions.get(api_key)
    if version is None:
        raise UnsupportedVersionError(
            f"broker {broker} does not support {api_name(api_key)} at any version this client "
            f"speaks ({CLIENT_VERSIONS.get(api_key, 'none')})"
        )
    if minimum is not None and version < minimum:
        raise UnsupportedVersionError(
            f"{api_name(api_key)} v{minimum}+ is needed, broker {broker} supports up to v{version}"
        )
    return version
