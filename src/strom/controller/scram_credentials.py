"""Users' SCRAM credentials through the metadata store (Kafka's ``ScramControlManager``).

AlterUserScramCredentials carries, per user and mechanism, a salt, an iteration count and the
*salted password* (the client salts; the password never reaches the broker). The store keeps
StoredKey and ServerKey derived from it (:mod:`strom.common.scram`), never the salted
password itself. Kafka's checks and messages, per user: a user named twice for the same
mechanism is DUPLICATE_RESOURCE; an empty name, too few / too many iterations or an empty salt
or salted password UNACCEPTABLE_CREDENTIAL; an unknown mechanism UNSUPPORTED_SASL_MECHANISM;
deleting a credential that does not exist RESOURCE_NOT_FOUND. A user with an error has none of
its changes applied; the others are written together in one conditional write.

Synchronous and single-threaded: called from the broker's event loop.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from strom.common import scram
from strom.common.errors import KafkaError, error_class
from strom.controller.updates import update
from strom.metadata.changes import MetadataChange, SetScramCredential
from strom.metadata.image import MetadataImage, ScramCredential
from strom.metadata.store import MetadataStore

log = logging.getLogger("strom.controller")


@dataclass(frozen=True, slots=True)
class Upsertion:
    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True, slots=True)
class Deletion:
    user: str
    mechanism: int


UserError = tuple[str, str]  # (Kafka error name, message)


def _check(change: Upsertion | Deletion, image: MetadataImage) -> UserError | None:
    if not change.user:
        return "UNACCEPTABLE_CREDENTIAL", "Username must not be empty"
    mechanism = scram.mechanism_by_code(change.mechanism)
    if mechanism is None:
        return "UNSUPPORTED_SASL_MECHANISM", "Unknown SCRAM mechanism"
    if isinstance(change, Deletion):
        if mechanism not in image.scram_credentials.get(change.user, {}):
            return ("RESOURCE_NOT_FOUND",
                    "Attempt to delete a user credential that does not exist")
        return None
    if change.iterations < scram.MIN_ITERATIONS:
        return "UNACCEPTABLE_CREDENTIAL", "Too few iterations"
    if change.iterations > scram.MAX_ITERATIONS:
        return "UNACCEPTABLE_CREDENTIAL", "Too many iterations"
    if not change.salt or not change.salted_password:
        return "UNACCEPTABLE_CREDENTIAL", "Salt and salted password must not be empty"
    return None


def alter(store: MetadataStore, deletions: Sequence[Deletion],
          upsertions: Sequence[Upsertion]) -> dict[str, UserError | None]:
    """Apply the request; the result per user (None: done), in first-mention order."""
    every: list[Upsertion | Deletion] = [*deletions, *upsertions]
    changes_by_user: dict[str, list[Upsertion | Deletion]] = {}
    for change in every:
        changes_by_user.setdefault(change.user, []).append(change)
    twice = Counter((c.user, c.mechanism) for c in every)

    def plan(image: MetadataImage) -> tuple[list[MetadataChange], dict[str, UserError | None]]:
        results: dict[str, UserError | None] = {}
        changes: list[MetadataChange] = []
        for user, user_changes in changes_by_user.items():
            error: UserError | None = None
            if any(twice[(user, c.mechanism)] > 1 for c in user_changes):
                error = ("DUPLICATE_RESOURCE",
                         "A user credential cannot be altered twice in the same request")
            for change in user_changes:
                error = error or _check(change, image)
            results[user] = error
            if error is None:
                changes += [_change(c) for c in user_changes]
        return changes, results

    try:
        results = update(store, plan, validate_only=False)
    except KafkaError as exc:  # the write failed (storage): every user gets the error
        failure = (exc.name, exc.message or exc.name)
        return {user: failure for user in changes_by_user}
    for user, error in results.items():
        if error is None:
            log.info("SCRAM credentials of user %s altered", user)
    return results


def _change(change: Upsertion | Deletion) -> SetScramCredential:
    mechanism = scram.mechanism_by_code(change.mechanism)
    assert mechanism is not None
    if isinstance(change, Deletion):
        return SetScramCredential(change.user, mechanism, None)
    keys = scram.derive(mechanism, change.salted_password)
    return SetScramCredential(change.user, mechanism, ScramCredential(
        change.salt, keys.stored_key, keys.server_key, change.iterations))


def describe(image: MetadataImage, users: Sequence[str] | None
             ) -> list[tuple[str, UserError | None, list[tuple[int, int]]]]:
    """(user, error, [(mechanism code, iterations)]) per requested user, or for every user
    with credentials when ``users`` is None or empty."""
    if not users:
        users = sorted(image.scram_credentials)
    counts = Counter(users)
    out: list[tuple[str, UserError | None, list[tuple[int, int]]]] = []
    for user in dict.fromkeys(users):
        if counts[user] > 1:
            out.append((user, ("DUPLICATE_RESOURCE", "Cannot describe SCRAM credentials for "
                               f"the same user twice in a single request: {user}"), []))
            continue
        creds = image.scram_credentials.get(user)
        if not creds:
            out.append((user, ("RESOURCE_NOT_FOUND",
                               f"Attempt to describe nonexistent user: {user}"), []))
            continue
        out.append((user, None, [(scram.MECHANISMS[m][1], c.iterations)
                                 for m, c in sorted(creds.items())]))
    return out


def code(error: UserError | None) -> int:
    return 0 if error is None else error_class(error[0]).code
