"""The replication factor of the internal topics (``__consumer_offsets``,
``__transaction_state``) when they are created, and ``__transaction_state``'s min ISR.

Kafka refuses to create them (FindCoordinator answers COORDINATOR_NOT_AVAILABLE) until as
many brokers are live as ``offsets.topic.replication.factor`` /
``transaction.state.log.replication.factor`` ask for (3 by default). strom creates them with
as many replicas as there are live brokers when fewer are, and logs a warning: its default
deployment is one broker, which must work without setting the factor to 1 first. The price
is the one Kafka avoids: an internal topic created while the cluster was still starting
keeps its smaller factor (raise it with a partition reassignment).

``__transaction_state`` gets the topic config ``min.insync.replicas`` =
``transaction.state.log.min.isr`` (default 2), as Kafka's transaction coordinator sets it, but
never more than the replication factor the topic is created with: Kafka writes the configured
value as is, and since it never creates the topic with fewer replicas than configured, only an
operator who lowers the factor without the min ISR (factor 1, min ISR 2) meets transactions
that can never complete (NOT_ENOUGH_REPLICAS, answered COORDINATOR_NOT_AVAILABLE); strom, which
does create it smaller, caps it. ``__consumer_offsets`` has no such setting in Kafka: it
inherits the broker's ``min.insync.replicas`` (default 1), and so it does here.
"""

from __future__ import annotations

import logging

log = logging.getLogger("strom.controller")


def internal_replication_factor(topic: str, configured: int, live_brokers: int) -> int:
    """The replication factor to create ``topic`` with: ``configured``, or the number of live
    brokers (at least 1) when fewer are live."""
    if live_brokers >= configured:
        return configured
    factor = max(1, live_brokers)
    log.warning("creating %s with replication factor %d: %d live broker(s), fewer than the "
                "configured %d", topic, factor, live_brokers, configured)
    return factor


def internal_min_isr(configured: int, replication_factor: int) -> int:
    """``min.insync.replicas`` of ``__transaction_state``: ``configured``
    (``transaction.state.log.min.isr``), at most ``replication_factor``."""
    return min(configured, replication_factor)
