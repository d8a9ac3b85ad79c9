"""Which partition logs a metadata image made this broker create, adopt or delete, reported
at INFO once per topic and reason (Kafka logs "Created log for partition …" / "Deleted log
for partition …"; one line per topic keeps a 1,000-partition topic readable):

    topic orders (id 5xQ2…): created the logs of partitions [0, 3]
    topic orders (id Hq9w…): deleted the logs of partitions [0, 3] (topic deleted)
    topic orders (id Hq9w…): deleted the logs of partitions [0] (the name now belongs to
        topic id 5xQ2…)

Topic ids are printed in Kafka's text form (:func:`strom.common.types.kafka_uuid`), as
``kafka-topics --describe`` shows them. Not thread-safe: one per image application, on the
event loop.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict

from strom.common.slices import Steps, run_at_once
from strom.common.types import TopicPartition, kafka_uuid


def id_text(topic_id: uuid.UUID | None) -> str:
    return kafka_uuid(topic_id) if topic_id is not None else "unknown"


class LogChanges:
    """Collects log events while an image is applied; :meth:`report` logs them."""

    def __init__(self) -> None:
        self._events: dict[tuple[str, str, uuid.UUID | None, str], list[int]] = \
            defaultdict(list)

    def add(self, what: str, tp: TopicPartition, topic_id: uuid.UUID | None,
            why: str = "") -> None:
        """``what`` happened to the log of ``tp`` (of ``topic_id``), because ``why``."""
        self._events[(what, tp.topic, topic_id, why)].append(tp.partition)

    def __bool__(self) -> bool:
        return bool(self._events)

    def report(self, log: logging.Logger) -> None:
        run_at_once(self.report_steps(log))

    def report_steps(self, log: logging.Logger) -> Steps[None]:
        """:meth:`report` as steps (:mod:`strom.common.slices`): a line each (a thousand
        new topics log a thousand lines)."""
        events, self._events = self._events, defaultdict(list)
        for (what, topic, topic_id, why), partitions in events.items():
            log.info("topic %s (id %s): %s the logs of partitions %s%s", topic,
                     id_text(topic_id), what, sorted(partitions), f" ({why})" if why else "")
            yield
