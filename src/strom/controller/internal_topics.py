"""The replication factor of the internal topics (``__consumer_offsets``,
``__transaction_state``) when they are created.

Kafka refuses to create them (FindCoordinator answers COORDINATOR_NOT_AVAILABLE) until as
many brokers are live as ``offsets.topic.replication.factor`` /
``transaction.state.log.replication.factor`` ask for (3 by default). strom creates them with
as many replicas as there are live brokers when fewer are, and logs a warning: its default
deployment is one broker, which must work without setting the factor to 1 first. The price
is the one Kafka avoids: an internal topic created while the cluster was still starting
keeps its smaller factor (raise it with a partition reassignment).
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
