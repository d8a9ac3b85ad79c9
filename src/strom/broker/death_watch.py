"""``DeathWatch``: tells a dead broker from a slow one by its listener, in a fraction of a
second.

A broker whose process is gone (kill -9, a crash, the OOM killer) leaves traces the network
reports at once: the kernel closes its sockets — a peer holding a connection to it sees that
connection end — and, its listening socket being closed too, a new connect to its port is
refused (``ECONNREFUSED``: its host answers the SYN with a reset). A broker that is only slow
— an event loop stalled for seconds, a process stopped by SIGSTOP — keeps its listening
socket: its kernel still completes handshakes into the backlog, so a connect succeeds (and the
request after it waits). So a refused connect is evidence of death and a timeout never is;
nothing here acts on a timeout.

Per watched broker — its id and broker epoch (the czxid of its registration), so a restarted
broker is a new target — one task keeps an idle connection open to the broker's inter-broker
listener (TLS and SASL as the broker's own connections). When that connection ends, the task
connects again at once: a connection opened means "alive" and is held in turn; any failure
other than a refusal (a timeout, a TLS or SASL error, a reset after the connect) means "not
known dead" and is retried after a back-off (from ``interval_s``, doubling up to 5 s);
``refusals`` refused connects in a row, ``interval_s`` apart, report the broker through
``on_dead(node_id, epoch)`` — again every :data:`RECHECK_S` while the refusals go on and it is
still watched, so an action that failed (ZooKeeper unreachable) is retried. ``refusals`` 0
watches nothing.

What it cannot see: a machine that disappears without resetting anything (power loss, a
network partition) closes and refuses nothing; such a broker is found when its ZooKeeper
session expires, as before. A broker that stops cleanly closes its listeners before its
session: it may be reported dead in between, which is what its session's end would say a
moment later.

Lifecycle: built by the broker's failure detector (:mod:`strom.broker.failure_detector`),
:meth:`DeathWatch.watch` after every metadata image, :meth:`DeathWatch.close` at shutdown.
Everything here belongs to the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from strom.client.conn import Connection, ConnectionRefused
from strom.client.security import ClientSecurity
from strom.common.errors import KafkaError

log = logging.getLogger("strom.broker.death_watch")

#: How often a broker already reported dead is reported again while its port keeps refusing.
RECHECK_S = 1.0
#: The longest back-off after connects that failed otherwise than by a refusal (it starts at
#: the interval and doubles: a broker killed while the watch reconnects may accept the
#: connect into its backlog and then reset it, and its next connect is then refused).
MAX_RETRY_S = 5.0
#: A held connection that ends sooner than this after it opened is followed by the back-off
#: (a broker closing new connections at once, e.g. over ``max.connections``).
SHORT_LIVED_S = 1.0
#: How long opening a watch connection may take (a stalled broker: then it is retried).
CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Target:
    """A watched broker: its id, broker epoch and inter-broker listener address."""

    node_id: int
    epoch: int
    host: str
    port: int


DeathListener = Callable[[int, int], None]


class DeathWatch:
    """See the module doc. ``on_dead(node_id, epoch)`` runs on the event loop."""

    def __init__(self, local_id: int, on_dead: DeathListener, *, refusals: int,
                 interval_s: float, security: ClientSecurity | None = None) -> None:
        self._local_id = local_id
        self._on_dead = on_dead
        self._refusals = refusals
        self._interval_s = interval_s
        self._security = security
        self._tasks: dict[Target, asyncio.Task[None]] = {}
        self._closed = False

    @property
    def enabled(self) -> bool:
        return self._refusals > 0

    @property
    def watched(self) -> frozenset[Target]:
        return frozenset(self._tasks)

    def watch(self, targets: Mapping[int, Target]) -> None:
        """Watch exactly ``targets`` (id → target); stop watching the others."""
        if self._closed or not self.enabled:
            return
        wanted = {t for n, t in targets.items() if n != self._local_id}
        for target in [t for t in self._tasks if t not in wanted]:
            self._tasks.pop(target).cancel()
        loop = asyncio.get_running_loop()
        for target in wanted - self._tasks.keys():
            self._tasks[target] = loop.create_task(
                self._watch(target), name=f"death-watch-{target.node_id}")

    async def close(self) -> None:
        self._closed = True
        tasks, self._tasks = list(self._tasks.values()), {}
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _watch(self, target: Target) -> None:
        refused = 0
        reported = False
        backoff = self._interval_s
        loop = asyncio.get_running_loop()
        while True:
            conn = Connection(target.host, target.port, node_id=target.node_id,
                              client_id=f"strom-death-watch-{self._local_id}",
                              connect_timeout_s=CONNECT_TIMEOUT_S, security=self._security)
            try:
                await conn.open()
            except ConnectionRefused:
                refused += 1
                if refused >= self._refusals:
                    log.log(logging.DEBUG if reported else logging.WARNING,
                            "broker %d (epoch %d) is gone: %d connects to %s:%d refused",
                            target.node_id, target.epoch, refused, target.host, target.port)
                    reported = True
                    self._on_dead(target.node_id, target.epoch)
                    await asyncio.sleep(RECHECK_S)
                else:
                    await asyncio.sleep(self._interval_s)
                continue
            except (KafkaError, OSError) as exc:  # slow, or refusing us otherwise: not dead
                log.debug("death watch of broker %d: %s", target.node_id, exc)
                refused, reported = 0, False
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_RETRY_S)
                continue
            refused, reported = 0, False
            opened = loop.time()
            try:
                reason = await conn.wait_closed()
            finally:
                await conn.close()
            log.debug("death watch of broker %d: connection ended (%s)", target.node_id,
                      reason)
            if loop.time() - opened < SHORT_LIVED_S:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_RETRY_S)
            else:
                backoff = self._interval_s
