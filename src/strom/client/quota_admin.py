"""Client quotas (KIP-546): the admin client's ``describe_client_quotas`` and
``alter_client_quotas``, as Kafka's ``Admin.describeClientQuotas`` /
``Admin.alterClientQuotas``, sent to any broker.

An entity is a mapping of entity type (``"user"``, ``"client-id"``) to a name, None for the
default entity (``<default>``). A filter component matches a type by exact name
(:func:`exact`), the default (:func:`default`) or any specified name (:func:`specified`);
``strict`` excludes entities naming other types. An alteration's ops set a key to a value or,
with None, remove it. An entry's error raises its :class:`~strom.common.errors.KafkaError`
(the first failing entry, after all were sent).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from strom.common.errors import error_for
from strom.protocol.versions import ApiKey

Entity = Mapping[str, str | None]
#: (entity type, match type, name): 0 exact name, 1 the default, 2 any specified name.
Component = tuple[str, int, str | None]
Request = Callable[[int, dict[str, Any]], Awaitable[Any]]  # (api key, fields) → response


def exact(entity_type: str, name: str) -> Component:
    return entity_type, 0, name


def default(entity_type: str) -> Component:
    return entity_type, 1, None


def specified(entity_type: str) -> Component:
    return entity_type, 2, None


@dataclass(frozen=True, slots=True)
class QuotaAlteration:
    entity: Entity
    #: quota key → new value, or None to remove it.
    ops: Mapping[str, float | None] = field(default_factory=dict)


def _entity_key(entity: Iterable[Any]) -> tuple[tuple[str, str | None], ...]:
    return tuple(sorted((e.entity_type, e.entity_name) for e in entity))


async def describe(request: Request, components: Iterable[Component], strict: bool
                   ) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    """{entity as sorted (type, name) pairs: {key: value}} of the matching entities."""
    response = await request(ApiKey.DESCRIBE_CLIENT_QUOTAS, {
        "components": [{"entity_type": t, "match_type": m, "match": n}
                       for t, m, n in components],
        "strict": strict})
    if response.error_code:
        raise error_for(response.error_code, response.error_message)
    return {_entity_key(entry.entity): {v.key: v.value for v in entry.values}
            for entry in response.entries or ()}


async def alter(request: Request, alterations: Iterable[QuotaAlteration],
                validate_only: bool) -> None:
    entries = [{"entity": [{"entity_type": t, "entity_name": n} for t, n in a.entity.items()],
                "ops": [{"key": k, "value": 0.0 if v is None else float(v),
                         "remove": v is None} for k, v in a.ops.items()]}
               for a in alterations]
    response = await request(ApiKey.ALTER_CLIENT_QUOTAS,
                             {"entries": entries, "validate_only": validate_only})
    for entry in response.entries:
        if entry.error_code:
            raise error_for(entry.error_code,
                            f"{dict(_entity_key(entry.entity))}: {entry.error_message or ''}")
