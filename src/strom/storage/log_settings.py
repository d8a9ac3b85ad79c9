"""The topic config values a log reads on hot paths, resolved once per config change."""

from __future__ import annotations

import random

from strom.common.config import TopicConfig


class LogSettings:
    """The topic config values read on hot paths, resolved once per config change.

    Immutable by convention: :meth:`strom.storage.log.Log.update_config` replaces the whole
    object, so a thread that picked one up (the flusher, the cleaner) sees a consistent set.
    """

    __slots__ = (
        "after_max_ms", "before_max_ms", "compact_policy", "delete_delay_ms", "delete_policy",
        "delete_retention_ms", "flush_messages", "flush_ms", "index_interval_bytes",
        "log_append_time", "max_compaction_lag_ms", "max_index_bytes", "max_message_bytes",
        "min_cleanable_ratio", "min_compaction_lag_ms", "producer_expiration_ms",
        "retention_bytes", "retention_ms", "segment_bytes", "segment_jitter_ms", "segment_ms",
        "verify_transactions",
    )

    def __init__(self, config: TopicConfig) -> None:
        self.segment_bytes = config.segment_bytes
        self.segment_ms = config.segment_ms
        self.segment_jitter_ms = int(config.get("segment.jitter.ms"))
        self.index_interval_bytes = config.index_interval_bytes
        self.max_index_bytes = config.segment_index_bytes
        self.max_message_bytes = config.max_message_bytes
        self.log_append_time = config.log_append_time
        self.before_max_ms = int(config.get("message.timestamp.before.max.ms"))
        self.after_max_ms = int(config.get("message.timestamp.after.max.ms"))
        self.retention_ms = config.retention_ms
        self.retention_bytes = config.retention_bytes
        self.delete_policy = "delete" in config.cleanup_policy
        self.compact_policy = "compact" in config.cleanup_policy
        self.delete_retention_ms = int(config.get("delete.retention.ms"))
        self.min_cleanable_ratio = float(config.get("min.cleanable.dirty.ratio"))
        self.min_compaction_lag_ms = int(config.get("min.compaction.lag.ms"))
        self.max_compaction_lag_ms = int(config.get("max.compaction.lag.ms"))
        self.flush_messages = config.flush_messages
        self.flush_ms = config.flush_ms
        self.delete_delay_ms = int(config.get("file.delete.delay.ms"))
        self.producer_expiration_ms = int(config.broker.get("producer.id.expiration.ms"))
        self.verify_transactions = bool(
            config.broker.get("transaction.partition.verification.enable"))

    def roll_jitter_ms(self) -> int:
        """A new segment's random ``segment.jitter.ms`` share (spreads time-based rolls)."""
        jitter = self.segment_jitter_ms
        return random.randrange(jitter) if jitter > 0 else 0
