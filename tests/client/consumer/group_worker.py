"""A consumer process for the group tests: ``python group_worker.py BOOTSTRAP GROUP TOPIC
ASSIGNOR OUT`` (``OUT`` gets one line per event, flushed: ``record P O``,
``assigned P,P``, ``revoked P,P``, ``lost P,P``). It commits after every poll and in its
revoke listener; SIGTERM makes it close cleanly (commit, revoke, LeaveGroup). ``ASSIGNOR``
``consumer-protocol`` makes it a KIP-848 member (``group_protocol="consumer"``: the broker
assigns, with its session timeout and heartbeat interval)."""

from __future__ import annotations

import signal
import sys
from typing import Any

from strom.client.sync import SyncConsumer


def main(bootstrap: str, group: str, topic: str, assignor: str, out_path: str) -> None:
    out = open(out_path, "a", buffering=1)  # noqa: SIM115 - line-buffered for the test
    stopping = False

    def stop(_signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    membership: dict[str, Any] = (
        {"group_protocol": "consumer"} if assignor == "consumer-protocol" else
        {"partition_assignment_strategy": assignor, "session_timeout_ms": 6000,
         "heartbeat_interval_ms": 300})
    consumer = SyncConsumer(bootstrap, group_id=group, enable_auto_commit=False,
                            auto_offset_reset="earliest", max_wait_ms=100, **membership)

    def line(kind: str, tps: Any) -> None:
        out.write(f"{kind} {','.join(str(tp.partition) for tp in sorted(tps))}\n")

    class Listener:
        def on_partitions_revoked(self, tps: Any) -> None:
            consumer.commit()  # before the partitions move: no record is read twice
            line("revoked", tps)

        def on_partitions_assigned(self, tps: Any) -> None:
            line("assigned", tps)

        def on_partitions_lost(self, tps: Any) -> None:
            line("lost", tps)

    consumer.subscribe([topic], listener=Listener())
    out.write("started\n")
    while not stopping:
        records = consumer.poll(0.3)
        for r in records:
            out.write(f"record {r.partition} {r.offset}\n")
        if records:
            consumer.commit()
    consumer.close()
    out.write("closed\n")


if __name__ == "__main__":
    main(*sys.argv[1:6])
