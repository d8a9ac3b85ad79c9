"""Which configured client quota applies to a connection (Kafka's ``DefaultQuotaCallback``).

A connection is identified by its user (the principal's name: ``alice`` for ``User:alice``,
``ANONYMOUS`` before / without authentication) and its client id. For each quota key
separately, the first of Kafka's eight entities that has that key set wins:

1. user + client id           5. default user + default client id
2. user + default client id   6. default user
3. user                       7. client id
4. default user + client id   8. default client id

The winner also says who shares the meter (Kafka's metric tags): a quota set for a user
(3, 6) is shared by all that user's client ids, one for a client id (7, 8) by every user
with that client id, one for both (1, 2, 4, 5) by that pair only. A default entity gives each
user / client id its own meter. No entity with the key: no quota.
"""

from __future__ import annotations

from collections.abc import Mapping

from strom.metadata.image import QuotaEntity

#: (user, client id) of a meter: "" where the quota does not tell them apart.
MeterKey = tuple[str, str]


def _entity(user: str | bool | None, client: str | bool | None) -> QuotaEntity:
    """The entity naming ``user`` / ``client`` (False: that type is absent; None: default)."""
    pairs: list[tuple[str, str | None]] = []
    if client is not False:
        pairs.append(("client-id", client))  # type: ignore[arg-type]
    if user is not False:
        pairs.append(("user", user))  # type: ignore[arg-type]
    return tuple(pairs)


def precedence(user: str, client_id: str) -> list[tuple[QuotaEntity, MeterKey]]:
    """Kafka's eight entities for (user, client id), first wins, with each one's meter."""
    both = (user, client_id)
    return [
        (_entity(user, client_id), both),
        (_entity(user, None), both),
        (_entity(user, False), (user, "")),
        (_entity(None, client_id), both),
        (_entity(None, None), both),
        (_entity(None, False), (user, "")),
        (_entity(False, client_id), ("", client_id)),
        (_entity(False, None), ("", client_id)),
    ]


def resolve(quotas: Mapping[QuotaEntity, Mapping[str, float]], key: str, user: str,
            client_id: str) -> tuple[float, MeterKey] | None:
    """(bound, meter) of quota ``key`` for this user and client id; None: no quota."""
    for entity, meter in precedence(user, client_id):
        values = quotas.get(entity)
        if values is not None and key in values:
            return values[key], meter
    return None
