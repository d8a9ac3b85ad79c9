"""The broker keys of KIP-848 consumer groups (Kafka's ``group.consumer.*``)."""

from __future__ import annotations

from dataclasses import dataclass

#: Server-side assignors, the default first (Kafka's ``group.consumer.assignors``).
ASSIGNORS = ("uniform", "range")


@dataclass(frozen=True, slots=True)
class ConsumerSettings:
    """``group.consumer.session.timeout.ms``, ``group.consumer.heartbeat.interval.ms``,
    ``group.consumer.max.size`` and ``group.consumer.assignors``, with Kafka's defaults."""

    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 5000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = ASSIGNORS
