"""Client quotas through the metadata store (Kafka's ``ClientQuotaControlManager``), for
AlterClientQuotas (49) and DescribeClientQuotas (48).

An entity names ``user`` and / or ``client-id`` (each at most once), or ``ip`` alone, each
with a name or None for the default entity. Keys and their types are Kafka's: for users and
client ids ``producer_byte_rate`` and ``consumer_byte_rate`` (long: a whole number),
``request_percentage`` and ``controller_mutation_rate`` (double); for an ip
``connection_creation_rate`` (int; enforced by :mod:`strom.broker.connection_rates`). Kafka's
answers (its KRaft ``ClientQuotaControlManager`` and ``ClientQuotasImage``), with its
messages, per entry: an empty entity, an entity type other than those three, a type named
twice, an empty name, ``ip`` combined with another type, an ip name that is not an IP
address, a key set twice, an entity named again later in the request (the first is
applied), a key of the other kind of entity or unknown, a value ≤ 0, a fractional value for
a long or int key or one too large for its type is INVALID_REQUEST and nothing of that
entry is applied (removing a key that is not set does nothing); the other entries are
written together in one conditional write (or, with ``validate_only``, only checked). Kafka
also accepts a host name for ``ip`` and resolves it; strom takes IP addresses only (a host
name is refused: resolving it would block the broker, and the addresses it stands for can
change). Describe: a type filtered twice, an exact match without a name, a name given for a
default or "specified" match, an unknown match type, ``ip`` filtered with another type are
INVALID_REQUEST, an unknown entity type UNSUPPORTED_VERSION; a "specified" match is any
entity naming the type, default or not.

Synchronous and single-threaded: called from the broker's event loop.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from strom.common.errors import KafkaError
from strom.controller.updates import update
from strom.metadata.changes import QUOTA_ENTITY_TYPES, MetadataChange, SetClientQuota
from strom.metadata.image import MetadataImage, QuotaEntity
from strom.metadata.store import MetadataStore

log = logging.getLogger("strom.controller")

#: Quota key → the largest whole number it takes (Kafka's LONG / INT keys; None: a double),
#: for users and client ids, and for IP addresses.
QUOTA_KEYS: dict[str, int | None] = {
    "producer_byte_rate": 2**63 - 1, "consumer_byte_rate": 2**63 - 1,
    "request_percentage": None, "controller_mutation_rate": None}
IP_QUOTA_KEYS: dict[str, int | None] = {"connection_creation_rate": 2**31 - 1}
_TYPE_NAMES = {2**63 - 1: "a LONG", 2**31 - 1: "an INT"}
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

Error = tuple[str, str]  # (Kafka error name, message)
RawEntity = Sequence[tuple[str, str | None]]


@dataclass(frozen=True, slots=True)
class QuotaOp:
    key: str
    value: float
    remove: bool


def entity_error(raw: RawEntity) -> Error | None:
    """The error Kafka answers for a request's entity, None when it is valid."""
    if not raw:
        return "INVALID_REQUEST", "Invalid empty client quota entity"
    seen: set[str] = set()
    for entity_type, name in raw:
        if entity_type in seen:
            return ("INVALID_REQUEST",
                    f"Invalid client quota entity, duplicate entity entry {entity_type}")
        seen.add(entity_type)
        if entity_type not in QUOTA_ENTITY_TYPES:
            return "INVALID_REQUEST", f"Unhandled client quota entity type: {entity_type}"
        if name == "":
            return "INVALID_REQUEST", f"Empty {entity_type} not supported"
    if "ip" in seen:
        if len(seen) > 1:  # Kafka's message, with its missing space
            return ("INVALID_REQUEST", "Invalid quota entity combination, IP entity should"
                    "not be combined with User or ClientId")
        name = raw[0][1]
        if name is not None and not _is_ip(name):
            return ("INVALID_REQUEST", f"{name} is not a valid IP or resolvable host. (strom "
                    "takes IP addresses only: host names are not resolved)")
    return None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def keys_of(raw: RawEntity) -> dict[str, int | None]:
    """The quota keys an entity takes (its types: a valid entity)."""
    return IP_QUOTA_KEYS if any(t == "ip" for t, _ in raw) else QUOTA_KEYS


def entity_of(raw: RawEntity) -> QuotaEntity:
    """The stored form of a valid entity: its pairs sorted by type."""
    return tuple(sorted((t, n) for t, n in raw))


def _check_op(op: QuotaOp, keys: dict[str, int | None]) -> Error | None:
    if op.remove:
        return None
    if op.key not in keys:
        return "INVALID_REQUEST", f"Invalid configuration key {op.key}"
    if not op.value > 0.0:
        return "INVALID_REQUEST", f"Quota {op.key} must be greater than 0"
    largest = keys[op.key]
    if largest is not None:
        if op.value > largest:
            return ("INVALID_REQUEST",
                    f"Proposed value for {op.key} is too large for {_TYPE_NAMES[largest]}.")
        if abs(op.value % 1.0) > 1e-6:
            return "INVALID_REQUEST", f"{op.key} cannot be a fractional value."
    return None


def _entry_error(raw: RawEntity, ops: Sequence[QuotaOp], twice: bool) -> Error | None:
    keys = [op.key for op in ops]
    duplicate = next((k for k in keys if keys.count(k) > 1), None)
    if duplicate is not None:
        return ("INVALID_REQUEST", f"Duplicate quota key {duplicate} not updating quota for "
                f"this entity {dict(raw)}")
    if twice:
        return "INVALID_REQUEST", f"Ignoring duplicate entity {dict(raw)}"
    error = entity_error(raw)
    if error is not None:
        return error
    allowed = keys_of(raw)
    return next((e for e in (_check_op(op, allowed) for op in ops) if e is not None), None)


def alter(store: MetadataStore, entries: Sequence[tuple[RawEntity, Sequence[QuotaOp]]],
          validate_only: bool) -> list[Error | None]:
    """Apply (or check) each entry; its result (None: done) in request order."""

    def plan(image: MetadataImage) -> tuple[list[MetadataChange], list[Error | None]]:
        changes: list[MetadataChange] = []
        results: list[Error | None] = []
        seen: set[QuotaEntity] = set()
        for raw, ops in entries:
            error = _entry_error(raw, ops, entity_of(raw) in seen)
            seen.add(entity_of(raw))
            results.append(error)
            if error is None:
                entity = entity_of(raw)
                changes += [SetClientQuota(entity, op.key, None if op.remove else op.value)
                            for op in ops]
        return changes, results

    try:
        results = update(store, plan, validate_only)
    except KafkaError as exc:  # the write failed (storage): every entry gets the error
        return [(exc.name, exc.message or exc.name)] * len(entries)
    if not validate_only:
        for (raw, _), error in zip(entries, results, strict=True):
            if error is None:
                log.info("client quotas of %s altered", dict(raw))
    return results


def _matches(entity: QuotaEntity, components: Sequence[tuple[str, int, str | None]],
             strict: bool) -> bool:
    names = dict(entity)
    if strict and len(names) != len(components):
        return False
    for entity_type, match_type, match in components:
        if entity_type not in names:
            return False
        name = names[entity_type]
        if match_type == MATCH_EXACT and name != match:
            return False
        if match_type == MATCH_DEFAULT and name is not None:
            return False
    return True


def _match_problem(match_type: int, match: str | None) -> str | None:
    if match_type == MATCH_EXACT:
        return None if match is not None else (
            "Request specified MATCH_TYPE_EXACT, but set match string to null.")
    if match_type == MATCH_DEFAULT:
        return None if match is None else (
            "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
    if match_type == MATCH_SPECIFIED:
        return None if match is None else (
            "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
    return f"Unknown match type {match_type}"


def describe(image: MetadataImage, components: Sequence[tuple[str, int, str | None]],
             strict: bool) -> list[tuple[QuotaEntity, dict[str, float]]] | Error:
    """The entities matching the filter with their values, or the error Kafka answers."""
    seen: set[str] = set()
    for entity_type, match_type, match in components:
        if not entity_type:
            return "INVALID_REQUEST", "Invalid empty entity type."
        if entity_type in seen:
            return ("INVALID_REQUEST",
                    f"Entity type {entity_type} cannot appear more than once in the filter.")
        seen.add(entity_type)
        if entity_type not in QUOTA_ENTITY_TYPES:
            return "UNSUPPORTED_VERSION", f"Unsupported entity type {entity_type}"
        problem = _match_problem(match_type, match)
        if problem is not None:
            return "INVALID_REQUEST", problem
    if "ip" in seen and len(seen) > 1:
        return ("INVALID_REQUEST", "Invalid entity filter component combination. IP filter "
                "component should not be used with user or clientId filter component.")
    return [(entity, dict(values)) for entity, values in sorted(
                image.client_quotas.items(), key=lambda kv: [(t, n or "") for t, n in kv[0]])
            if _matches(entity, components, strict)]
