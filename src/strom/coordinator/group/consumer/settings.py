"""The broker keys of KIP-848 consumer groups (Kafka's ``group.consumer.*``)."""

from __future__ import annotations

from dataclasses import dataclass

#: Server-side assignors, the default first (Kafka's ``group.consumer.assignors``).
ASSIGNORS = ("uniform", "range")


def assignor_names(configured: list[str]) -> tuple[str, ...]:
    """``group.consumer.assignors`` as assignor names (Kafka also takes its built-in
    assignors' class names: ``...assignor.UniformAssignor`` is ``uniform``)."""
    names = []
    for entry in configured:
        short = entry.rsplit(".", 1)[-1].removesuffix("Assignor").lower()
        if short not in names:
            names.append(short)
    return tuple(names) or ASSIGNORS


@dataclass(frozen=True, slots=True)
class ConsumerSettings:
    """``group.consumer.session.timeout.ms``, ``group.consumer.heartbeat.interval.ms``,
    ``group.consumer.max.size`` and ``group.consumer.assignors``, with Kafka's defaults."""

    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 5000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = ASSIGNORS
