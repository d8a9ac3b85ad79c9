"""The simulation's scripted network: seeded delays and drops, cut links, paused nodes.

Nodes are named by ints (brokers ``1..n``, the store / controller ``STORE``, producers
negative). A message is a callback run at its delivery time on the shared
:class:`~strom.testing.scheduler.ManualScheduler`. Invariants:

* per ordered pair of nodes, messages are delivered in the order sent (a TCP connection);
* a message is dropped when the link is cut or either end is down when it is sent or when it
  arrives, and with probability ``drop_rate`` otherwise;
* a message to a paused node waits until the node resumes (a stopped process's socket
  buffer), keeping the per-pair order;
* ``incarnation`` of a node changes on every restart: a message sent to an earlier
  incarnation is dropped (its connection died with the process).

Everything is driven by the one seeded ``random.Random`` of the simulation, so a seed
replays exactly.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from strom.testing.scheduler import ManualScheduler

STORE = 0


class Network:
    """See the module docstring."""

    def __init__(self, scheduler: ManualScheduler, rng: random.Random, *,
                 min_delay_ms: int = 1, max_delay_ms: int = 15, drop_rate: float = 0.01) -> None:
        self.scheduler = scheduler
        self.rng = rng
        self.min_delay_ms = min_delay_ms
        self.max_delay_ms = max_delay_ms
        self.drop_rate = drop_rate
        self.down: set[int] = set()
        self.paused: dict[int, list[Callable[[], None]]] = {}
        self.incarnation: dict[int, int] = {}
        self._cut: set[frozenset[int]] = set()
        self._last_delivery: dict[tuple[int, int], int] = {}
        self.sent = 0
        self.dropped = 0

    # -- faults -----------------------------------------------------------------------------
    def cut(self, a: int, b: int) -> None:
        self._cut.add(frozenset((a, b)))

    def heal(self, a: int, b: int) -> None:
        self._cut.discard(frozenset((a, b)))

    def heal_all(self) -> None:
        self._cut.clear()

    def connected(self, a: int, b: int) -> bool:
        return (a not in self.down and b not in self.down
                and frozenset((a, b)) not in self._cut)

    def pause(self, node: int) -> None:
        self.paused.setdefault(node, [])

    def resume(self, node: int) -> None:
        for deliver in self.paused.pop(node, []):
            deliver()

    # -- sending ----------------------------------------------------------------------------
    def send(self, src: int, dst: int, deliver: Callable[[], None]) -> None:
        """Deliver ``deliver()`` at ``dst`` after a seeded delay, or drop it."""
        self.sent += 1
        if not self.connected(src, dst) or self.rng.random() < self.drop_rate:
            self.dropped += 1
            return
        now = self.scheduler.clock.now_ms()
        at = now + self.rng.randint(self.min_delay_ms, self.max_delay_ms)
        at = max(at, self._last_delivery.get((src, dst), 0))
        self._last_delivery[(src, dst)] = at
        incarnation = self.incarnation.get(dst, 0)

        def arrive() -> None:
            if not self.connected(src, dst) or self.incarnation.get(dst, 0) != incarnation:
                self.dropped += 1
                return
            held = self.paused.get(dst)
            if held is not None:
                held.append(arrive)
                return
            deliver()

        self.scheduler.call_later(at - now, arrive)
