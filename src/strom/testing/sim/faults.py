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


PLANTED = {"hw-ignores-isr": HighWatermarkIgnoresIsr}
