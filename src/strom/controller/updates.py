"""Conditional metadata writes, planned against the image they apply to.

A *plan* reads an image, validates the request against it (raising Kafka errors) and returns
the :mod:`strom.metadata.changes` to write plus a result for the caller. :func:`update` writes
the changes conditioned on that image's epoch; when another writer got in between
(:class:`StaleMetadataError`) it plans again against the new image, a few times. With
``validate_only`` it plans once and writes nothing. ``before_write`` (optional) runs just before
each write attempt with the image and the changes (TopicAdmin creates new partitions' local
logs there) and returns an undo, called when that attempt's write does not happen.
Synchronous, event-loop thread only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from strom.metadata.changes import MetadataChange
from strom.metadata.image import MetadataImage
from strom.metadata.store import MetadataStore, StaleMetadataError

WRITE_ATTEMPTS = 5
T = TypeVar("T")

Plan = Callable[[MetadataImage], tuple[list[MetadataChange], T]]
BeforeWrite = Callable[[MetadataImage, Sequence[MetadataChange]], Callable[[], None]]


def update(store: MetadataStore, plan: Plan[T], validate_only: bool, *,
           before_write: BeforeWrite | None = None) -> T:
    """Plan against the current image and write conditionally, re-planning if it moved."""
    for attempt in range(WRITE_ATTEMPTS):
        image = store.image
        changes, result = plan(image)
        if validate_only:
            return result
        undo = before_write(image, changes) if before_write is not None else None
        try:
            store.write(image.epoch, changes)
        except StaleMetadataError:
            if undo is not None:
                undo()
            if attempt == WRITE_ATTEMPTS - 1:
                raise
            continue
        except BaseException:
            if undo is not None:
                undo()
            raise
        return result
    raise AssertionError("unreachable")  # pragma: no cover
