"""Kafka client properties (``linger.ms=10``) as keyword arguments of strom's clients.

Kafka's tools take any client setting as a Java property (``--producer-property``,
``--command-config FILE``). strom's clients take Python keyword arguments; this module is the
one table between the two: per client kind, each Kafka key strom honours, the keyword it sets
and how its text is parsed (names, units and value syntax as in Kafka; ``*.ms`` timeouts become
the client's ``*_s`` seconds). A key strom does not honour is refused with an error that names
it and lists the keys that are supported — never silently ignored, since a setting that does
nothing (say ``acks=all`` misspelt) is worse than a failed start.

``bootstrap.servers`` maps to the ``bootstrap`` argument every client takes; the TLS and SASL
keys (``security.protocol``, ``ssl.*``, ``sasl.*``) together make its ``security`` argument
(:class:`~strom.client.security.ClientSecurity`). The consumer
keys ``group.id``, ``enable.auto.commit`` and ``auto.commit.interval.ms`` are group settings
(:data:`GROUP_KEYWORDS`), which the group-less :class:`~strom.client.fetcher.Fetcher` does
not take; whoever manages the group's offsets reads them. The group-membership keys
(``session.timeout.ms``, ``partition.assignment.strategy``, …, :data:`MEMBER_KEYWORDS`) are
taken by :class:`~strom.client.consumer.Consumer` only. Deserializers are given by name
(``str``, ``int``, ``json``, …), not by Java class.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from strom.client.partitioner import partitioner_names
from strom.client.records import CODECS, ClientConfigError
from strom.client.security import PROPERTY_KEYS as SECURITY_KEYS
from strom.client.security import ClientSecurity
from strom.client.serializers import serializer_names

Parser = Callable[[str, str], Any]  # (key, text) -> value


class UnknownPropertyError(ClientConfigError):
    """A property key that strom's client for that kind does not honour."""


def _text(_key: str, text: str) -> str:
    return text.strip()


def _integer(low: int) -> Callable[[str, str], int]:
    def parse(key: str, text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            value = low - 1
        if value < low:
            raise ClientConfigError(f"{key} must be an integer ≥ {low}, got {text!r}")
        return value

    return parse


def _seconds(low_ms: int) -> Parser:
    """A ``*.ms`` duration as the seconds the client takes."""
    as_int = _integer(low_ms)

    def parse(key: str, text: str) -> float:
        return as_int(key, text) / 1000.0

    return parse


def _boolean(key: str, text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ClientConfigError(f"{key} must be true or false, got {text!r}")
    return value == "true"


def _choice(*choices: str, values: Mapping[str, Any] | None = None) -> Parser:
    def parse(key: str, text: str) -> Any:
        value = text.strip().lower()
        if value not in choices:
            raise ClientConfigError(f"{key} must be one of {', '.join(choices)}, got {text!r}")
        return values[value] if values is not None else value

    return parse


def _named(names: list[str]) -> Parser:
    """A name from ``names`` (serializers, partitioners), kept as written."""
    def parse(key: str, text: str) -> str:
        value = text.strip()
        if value not in names and value.lower() not in names:
            raise ClientConfigError(f"{key} must be one of {', '.join(names)}, got {text!r}")
        return value if value in names else value.lower()

    return parse


# key -> (keyword argument, or None for a key that is only checked; parser)
_COMMON: dict[str, tuple[str | None, Parser]] = {
    "bootstrap.servers": ("bootstrap", _text),
    "client.id": ("client_id", _text),
    "request.timeout.ms": ("request_timeout_s", _seconds(1)),
    # TLS and SASL keys (strom.client.security) are gathered into the ``security`` keyword.
    **{key: ("security", _text) for key in SECURITY_KEYS},
}

PRODUCER: dict[str, tuple[str | None, Parser]] = {
    **_COMMON,
    "acks": ("acks", _choice("all", "-1", "0", "1",
                             values={"all": -1, "-1": -1, "0": 0, "1": 1})),
    "compression.type": ("compression", _choice(*CODECS)),
    "linger.ms": ("linger_ms", _integer(0)),
    "batch.size": ("batch_size", _integer(1)),
    "max.request.size": ("max_request_size", _integer(1)),
    "buffer.memory": ("buffer_memory", _integer(1)),
    "enable.idempotence": ("idempotent", _boolean),
    "max.in.flight.requests.per.connection": ("max_in_flight", _integer(1)),
    "delivery.timeout.ms": ("delivery_timeout_s", _seconds(1)),
    "transactional.id": ("transactional_id", _text),
    "transaction.timeout.ms": ("transaction_timeout_ms", _integer(1)),
    "max.block.ms": ("max_block_s", _seconds(0)),
    "key.serializer": ("key_serializer", _named(serializer_names())),
    "value.serializer": ("value_serializer", _named(serializer_names())),
    "partitioner": ("partitioner", _named(partitioner_names())),  # librdkafka's name
    "partitioner.class": ("partitioner", _named(partitioner_names())),  # Java's
}

CONSUMER: dict[str, tuple[str | None, Parser]] = {
    **_COMMON,
    "auto.offset.reset": ("auto_offset_reset", _choice("earliest", "latest", "none")),
    "fetch.max.wait.ms": ("max_wait_ms", _integer(0)),
    "fetch.min.bytes": ("min_bytes", _integer(0)),
    "fetch.max.bytes": ("max_bytes", _integer(1)),
    "max.partition.fetch.bytes": ("max_partition_bytes", _integer(1)),
    "client.rack": ("client_rack", _text),
    "isolation.level": ("isolation_level", _choice(
        "read_uncommitted", "read_committed",
        values={"read_uncommitted": 0, "read_committed": 1})),
    "group.id": ("group_id", _text),
    "enable.auto.commit": ("enable_auto_commit", _boolean),
    "auto.commit.interval.ms": ("auto_commit_interval_ms", _integer(1)),
    # Group membership: keys of strom.client.Consumer only (MEMBER_KEYWORDS).
    "group.instance.id": ("group_instance_id", _text),
    "session.timeout.ms": ("session_timeout_ms", _integer(1)),
    "heartbeat.interval.ms": ("heartbeat_interval_ms", _integer(1)),
    "max.poll.interval.ms": ("max_poll_interval_ms", _integer(1)),
    "max.poll.records": ("max_poll_records", _integer(1)),
    "metadata.max.age.ms": ("metadata_max_age_ms", _integer(0)),
    "partition.assignment.strategy": ("partition_assignment_strategy", _text),
    "key.deserializer": ("key_deserializer", _text),
    "value.deserializer": ("value_deserializer", _text),
}

ADMIN: dict[str, tuple[str | None, Parser]] = dict(_COMMON)

#: Consumer keywords that belong to a group's offset management, not to the Fetcher.
GROUP_KEYWORDS = ("group_id", "enable_auto_commit", "auto_commit_interval_ms")
#: Consumer keywords only the group :class:`~strom.client.consumer.Consumer` takes (group
#: membership, poll loop, deserializers); a group-less Fetcher refuses them.
MEMBER_KEYWORDS = ("group_instance_id", "session_timeout_ms", "heartbeat_interval_ms",
                   "max_poll_interval_ms", "max_poll_records", "metadata_max_age_ms",
                   "partition_assignment_strategy", "key_deserializer", "value_deserializer")

_KINDS = {"producer": PRODUCER, "consumer": CONSUMER, "admin": ADMIN}


def client_options(kind: str, properties: Mapping[str, str]) -> dict[str, Any]:
    """Keyword arguments for strom's ``kind`` client ("producer", "consumer" or "admin")
    from Kafka property ``properties``; ClientConfigError for an unsupported key or value."""
    table = _KINDS[kind]
    out: dict[str, Any] = {}
    security: dict[str, str] = {}
    for key, text in properties.items():
        name = key.strip()
        entry = table.get(name)
        if entry is None:
            raise UnknownPropertyError(_unknown(kind, name, table))
        keyword, parse = entry
        value = parse(name, text)
        if keyword == "security":
            security[name] = value
        elif keyword is not None:
            out[keyword] = value
    if security:
        out["security"] = ClientSecurity.from_properties(security)
    if out.get("idempotent") and out.get("acks", -1) != -1:
        raise ClientConfigError("enable.idempotence=true needs acks=all (-1)")
    if out.get("transactional_id") is not None:
        if out.get("idempotent") is False:
            raise ClientConfigError("transactional.id needs enable.idempotence=true")
        if out.get("acks", -1) != -1:
            raise ClientConfigError("transactional.id needs acks=all (-1)")
    return out


def _unknown(kind: str, name: str, table: Mapping[str, object]) -> str:
    return (f"unknown {kind} property {name!r}; strom's {kind} supports "
            f"{', '.join(sorted(table))}")
