"""ACLs through the metadata store (Kafka's ``AclControlManager``).

CreateAcls: each binding is checked (:func:`strom.common.acl.binding_problem`; a bad one is
INVALID_REQUEST with Kafka's message, the others still apply) and the valid ones are written in
one conditional write, one :class:`~strom.metadata.changes.SetAcls` per resource pattern
touched; creating an ACL that exists succeeds and changes nothing. DeleteAcls: per filter, the
bindings it matches are removed (a filter with an UNKNOWN code is INVALID_REQUEST), all filters
in one write; a binding matched by several filters is reported by each. DescribeAcls: the
bindings a filter matches. Synchronous, event-loop thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

from strom.common.acl import (
    AccessControlEntry,
    AclBinding,
    AclFilter,
    ResourcePattern,
    binding_problem,
)
from strom.controller.updates import update
from strom.metadata.changes import MetadataChange, SetAcls
from strom.metadata.image import MetadataImage
from strom.metadata.store import MetadataStore

log = logging.getLogger("strom.controller")

Problem = tuple[str, str]  # (Kafka error name, message)


def bindings(image: MetadataImage) -> Iterator[AclBinding]:
    for pattern, entries in image.acls.items():
        for entry in entries:
            yield AclBinding(pattern, entry)


def describe(image: MetadataImage, acl_filter: AclFilter) -> list[AclBinding]:
    """The stored bindings ``acl_filter`` matches, sorted."""
    return sorted(b for b in bindings(image) if acl_filter.matches(b))


def _changes(acls: dict[ResourcePattern, frozenset[AccessControlEntry]],
             touched: set[ResourcePattern]) -> list[MetadataChange]:
    return [SetAcls(p, acls.get(p, frozenset())) for p in sorted(touched)]


def create(store: MetadataStore, new: Sequence[AclBinding]) -> list[Problem | None]:
    """Store ``new``; one result per binding (None: created or already there)."""
    results: list[Problem | None] = [
        None if (problem := binding_problem(b)) is None else ("INVALID_REQUEST", problem)
        for b in new]

    def plan(image: MetadataImage) -> tuple[list[MetadataChange], None]:
        acls = dict(image.acls)
        touched: set[ResourcePattern] = set()
        for binding, result in zip(new, results, strict=True):
            if result is None:
                entries = acls.get(binding.pattern, frozenset())
                if binding.entry not in entries:
                    acls[binding.pattern] = entries | {binding.entry}
                    touched.add(binding.pattern)
        return _changes(acls, touched), None

    if any(r is None for r in results):
        update(store, plan, validate_only=False)
        log.info("ACLs created: %s", [b for b, r in zip(new, results, strict=True)
                                      if r is None])
    return results


def delete(store: MetadataStore, filters: Sequence[AclFilter]
           ) -> list[tuple[Problem | None, list[AclBinding]]]:
    """Remove what each filter matches; per filter its problem or the bindings removed."""
    problems: list[Problem | None] = [
        None if (problem := f.problem()) is None else ("INVALID_REQUEST", problem)
        for f in filters]

    def plan(image: MetadataImage
             ) -> tuple[list[MetadataChange], list[tuple[Problem | None, list[AclBinding]]]]:
        acls = dict(image.acls)
        touched: set[ResourcePattern] = set()
        out: list[tuple[Problem | None, list[AclBinding]]] = []
        for acl_filter, problem in zip(filters, problems, strict=True):
            if problem is not None:
                out.append((problem, []))
                continue
            matched = describe(image, acl_filter)
            for binding in matched:
                entries = acls.get(binding.pattern, frozenset()) - {binding.entry}
                acls[binding.pattern] = entries
                touched.add(binding.pattern)
            out.append((None, matched))
        return _changes(acls, touched), out

    results = update(store, plan, validate_only=False)
    removed = [b for _, matched in results for b in matched]
    if removed:
        log.info("ACLs deleted: %s", removed)
    return results
