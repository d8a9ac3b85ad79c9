"""Planted bugs, to show the simulation finds them (test-only; never used by the broker)."""

from __future__ import annotations

from strom.replication.partition import Partition


class HighWatermarkIgnoresIsr(Partition):
    """A leader that moves its high watermark to its own log end without waiting for the
    in-sync followers: an acks=-1 produce is acknowledged before it is replicated."""

    def maybe_increment_high_watermark(self) -> bool:
        if not self.is_leader or self.log.log_end_offset <= self.high_watermark:
            return False
        self._set_high_watermark(self.log.log_end_offset)
        self._notify_high_watermark()
        return True


class MinInsyncIgnored(Partition):
    """A leader that ignores min.insync.replicas: with its ISR shrunk to itself it still
    takes acks=-1 produces and acknowledges them on its own log alone."""

    @property
    def min_insync_replicas(self) -> int:
        return 1

    @min_insync_replicas.setter
    def min_insync_replicas(self, value: int) -> None:
        pass  # the topic's min.insync.replicas is ignored


PLANTED = {"hw-ignores-isr": HighWatermarkIgnoresIsr, "min-isr-ignored": MinInsyncIgnored}
