"""``strom`` with a test hook: SIGUSR2 stalls the broker's event loop.

    STROM_TEST_STALL_S=2 python -m strom.testing.stall broker --data-dir …

The same command as ``python -m strom …``, plus a SIGUSR2 handler that sleeps
``STROM_TEST_STALL_S`` seconds (2 unless set) on the main thread — the thread running the
broker's event loop — as a synchronous handler or a long pause in Python would: nothing on
the loop runs meanwhile (no request is answered, no timer fires), while the broker's other
threads (the ZooKeeper client's, the metadata and ISR writers) and the kernel (accepting
connections into the listen backlog) carry on. :class:`~strom.testing.EmbeddedBroker` launches
brokers this way with ``stall_seconds`` and sends the signal from :meth:`EmbeddedBroker.stall`.
Only tests run this module; nothing in strom imports it, and ``strom`` itself has no such hook.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from types import FrameType

#: The environment variable holding the stall's length in seconds.
STALL_ENV = "STROM_TEST_STALL_S"


def install(seconds: float) -> None:
    """SIGUSR2 → sleep ``seconds`` on the main thread."""
    def stall(_signum: int, _frame: FrameType | None) -> None:
        time.sleep(seconds)

    signal.signal(signal.SIGUSR2, stall)


def main() -> int:
    install(float(os.environ.get(STALL_ENV, "2")))
    from strom.cli.main import main as strom_main

    return strom_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
