"""Users' SCRAM credentials (KIP-554): the admin client's ``describe_user_scram_credentials``
and ``alter_user_scram_credentials``, sent to the controller as Kafka's admin client does.

An upsertion is salted here: the client draws a random salt, computes the salted password
(PBKDF2 with the mechanism's HMAC, :mod:`strom.common.scram`) and sends only that; the broker
never sees the password. Results are per user: a user's error raises its
:class:`~strom.common.errors.KafkaError` (the first failing user, after all were sent).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from strom.common import scram
from strom.common.errors import error_for
from strom.protocol.versions import ApiKey

DEFAULT_ITERATIONS = 8192  # Kafka's kafka-configs.sh default when iterations is not given
SALT_BYTES = 32


@dataclass(frozen=True, slots=True)
class ScramUpsert:
    user: str
    mechanism: str  # "SCRAM-SHA-256" / "SCRAM-SHA-512"
    password: str
    iterations: int = DEFAULT_ITERATIONS


@dataclass(frozen=True, slots=True)
class ScramDelete:
    user: str
    mechanism: str


@dataclass(frozen=True, slots=True)
class UserScramCredentials:
    user: str
    #: (mechanism name, iterations) per credential the user has.
    credentials: tuple[tuple[str, int], ...]


Send = Callable[[int, Any, str], Awaitable[Any]]  # (api key, build(conn), results field)


def _code(mechanism: str) -> int:
    if mechanism not in scram.MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r} (one of "
                         f"{', '.join(scram.MECHANISMS)})")
    return scram.MECHANISMS[mechanism][1]


def alter_request(changes: Iterable[ScramUpsert | ScramDelete]) -> dict[str, Any]:
    deletions, upsertions = [], []
    for change in changes:
        if isinstance(change, ScramDelete):
            deletions.append({"name": change.user, "mechanism": _code(change.mechanism)})
            continue
        code = _code(change.mechanism)
        salt = os.urandom(SALT_BYTES)
        salted = scram.salted_password(change.mechanism, change.password, salt,
                                       change.iterations)
        upsertions.append({"name": change.user, "mechanism": code,
                           "iterations": change.iterations, "salt": salt,
                           "salted_password": salted})
    return {"deletions": deletions, "upsertions": upsertions}


async def alter(send: Send, changes: Iterable[ScramUpsert | ScramDelete]) -> None:
    request = alter_request(changes)
    response = await send(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, lambda _c: request, "results")
    for result in response.results:
        if result.error_code:
            raise error_for(result.error_code,
                            f"user {result.user!r}: {result.error_message or ''}".rstrip(": "))


async def describe(send: Send, users: Iterable[str] | None) -> list[UserScramCredentials]:
    names = None if users is None else [{"name": u} for u in users]
    response = await send(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
                          lambda _c: {"users": names}, "results")
    if response.error_code:
        raise error_for(response.error_code, response.error_message)
    out = []
    for result in response.results:
        if result.error_code:
            raise error_for(result.error_code, result.error_message)
        out.append(UserScramCredentials(result.user, tuple(
            (scram.mechanism_by_code(i.mechanism) or str(i.mechanism), i.iterations)
            for i in result.credential_infos)))
    return out
