"""Fault primitives on a running cluster. Each records what it did in the history (process
``nemesis``, one event when a fault starts and one when it is in place / over), and
:meth:`Nemesis.heal_all` undoes whatever is still applied (resumes paused brokers, heals the
network, starts killed brokers) — call it in a ``finally``.

Faults: kill -9 (a node, a partition's leader, the controller, a random broker); SIGSTOP /
SIGCONT; a stall of a broker's event loop (the cluster's test hook: the process and its sockets
live on, nothing on its loop runs); ZooKeeper session expiry (a broker paused until its
registration znode is gone — the broker's own session cannot be stolen from outside its
process); a rolling restart (clean stop and start, one broker at a time); cutting the tail off
a stopped broker's log; a network partition of one broker from the others (and optionally from
ZooKeeper) through the cluster's :class:`~strom.testing.chaos.netns.NetworkFabric`.

One owner thread (the schedule runner or the test) drives a Nemesis."""

from __future__ import annotations

import random
import time
from collections.abc import Iterable

from strom.testing.chaos.cluster import Cluster, network_of
from strom.testing.chaos.history import History
from strom.testing.chaos.replicas import truncate_replica
from strom.testing.chaos.zkview import ZooKeeperView


class Nemesis:
    def __init__(self, cluster: Cluster, history: History, *, seed: int = 0) -> None:
        self.cluster, self.history = cluster, history
        self.random = random.Random(seed)
        self.killed: set[int] = set()
        self.paused: set[int] = set()
        self._view: ZooKeeperView | None = None

    @property
    def view(self) -> ZooKeeperView:
        if self._view is None:
            self._view = ZooKeeperView(self.cluster.zookeeper_connect)
        return self._view

    def _live(self) -> list[int]:
        return sorted(set(self.cluster.brokers) - self.killed)

    # -- processes ---------------------------------------------------------------------------

    def kill(self, node: int) -> int:
        """kill -9 broker ``node`` (its data directory stays)."""
        broker = self.cluster.brokers[node]
        self.history.nemesis("kill", {"node": node, "pid": broker.pid})
        if node in self.paused:
            self.resume(node)
        broker.kill()
        self.killed.add(node)
        self.history.nemesis("killed", {"node": node})
        return node

    def leader(self, topic: str, partition: int) -> int:
        state = self.view.partition_state(topic, partition)
        if state is None or not isinstance(state["leader"], int) or state["leader"] < 0:
            raise LookupError(f"{topic}-{partition} has no leader")
        return state["leader"]

    def kill_leader(self, topic: str, partition: int) -> int:
        return self.kill(self.leader(topic, partition))

    def kill_controller(self) -> int:
        return self.kill(self.cluster.controller_id())

    def kill_random(self) -> int:
        return self.kill(self.random.choice(self._live()))

    def start(self, node: int, wait: bool = True, timeout: float = 60.0) -> None:
        """Start a killed or stopped broker again; with ``wait``, until it is registered.

        A killed broker's registration outlives it until ZooKeeper expires its session, and
        a broker refuses to start while its id is registered (as Kafka's does), so this
        first waits for the old registration to go."""
        self.view.wait_for(f"broker {node}'s old registration to expire",
                           lambda: node not in self.view.brokers(), timeout)
        self.history.nemesis("start", {"node": node})
        self.cluster.brokers[node].start()
        self.killed.discard(node)
        if wait:
            self.view.wait_for(f"broker {node} registered", lambda: node in self.view.brokers(),
                               timeout)
        self.history.nemesis("started", {"node": node, "pid": self.cluster.brokers[node].pid})

    def pause(self, node: int) -> None:
        """SIGSTOP: the process keeps its sockets but answers nothing (a zombie to be)."""
        self.history.nemesis("pause", {"node": node})
        self.cluster.pause(node)
        self.paused.add(node)

    def resume(self, node: int) -> None:
        self.cluster.resume(node)
        self.paused.discard(node)
        self.history.nemesis("resume", {"node": node})

    def stall(self, node: int) -> None:
        """Block ``node``'s event loop for the cluster's stall length (returns at once)."""
        self.history.nemesis("stall", {"node": node})
        self.cluster.stall(node)

    def expire_session(self, node: int, timeout: float = 60.0) -> None:
        """Pause ``node`` until ZooKeeper expired its session (its ``/brokers/ids`` znode is
        gone), then resume it and wait until it registered again."""
        self.pause(node)
        try:
            self.view.wait_for(f"broker {node}'s session to expire",
                               lambda: node not in self.view.brokers(), timeout)
            self.history.nemesis("session-expired", {"node": node})
        finally:
            self.resume(node)
        self.view.wait_for(f"broker {node} to register again",
                           lambda: node in self.view.brokers(), timeout)
        self.history.nemesis("re-registered", {"node": node})

    def rolling_restart(self, nodes: Iterable[int] | None = None, timeout: float = 60.0) -> None:
        """Clean stop and start of each broker in turn, waiting for all to be registered
        before the next."""
        order = sorted(self.cluster.brokers) if nodes is None else list(nodes)
        for node in order:
            self.history.nemesis("stop", {"node": node})
            self.cluster.brokers[node].stop()
            self.start(node, timeout=timeout)
            self.cluster.wait_for_brokers(len(self.cluster.brokers), timeout)

    def truncate(self, node: int, topic: str, partition: int, keep: int) -> int:
        """Cut the tail of a stopped (killed) broker's copy so its log ends before ``keep``;
        returns the new end."""
        if node not in self.killed:
            raise RuntimeError(f"broker {node} must be stopped before its log is cut")
        end = truncate_replica(self.cluster.brokers[node].data_dir, topic, partition, keep)
        self.history.nemesis("truncate", {"node": node, "topic": topic,
                                          "partition": partition, "end": end})
        return end

    # -- network -----------------------------------------------------------------------------

    def isolate(self, node: int, *, zookeeper: bool = False) -> None:
        """Cut broker ``node`` off from the other brokers (and ZooKeeper with ``zookeeper``);
        clients still reach every broker."""
        network = network_of(self.cluster)
        if network is None:
            raise RuntimeError("the cluster's brokers do not run in network namespaces")
        network.isolate(node, zookeeper=zookeeper)
        self.history.nemesis("isolate", {"node": node, "zookeeper": zookeeper})

    def heal_network(self) -> None:
        network = network_of(self.cluster)
        if network is not None and network.cuts:
            network.heal()
            self.history.nemesis("heal-network", {})

    # -- undo everything -----------------------------------------------------------------------

    def heal_all(self, timeout: float = 60.0) -> None:
        """Resume paused brokers, heal the network, start killed brokers, wait for all."""
        for node in sorted(self.paused):
            self.resume(node)
        self.heal_network()
        for node in sorted(self.killed):
            self.start(node, timeout=timeout)
        self.cluster.wait_for_brokers(len(self.cluster.brokers), timeout)
        self.history.nemesis("healed", {})

    def wait(self, seconds: float) -> None:
        time.sleep(seconds)

    def close(self) -> None:
        if self._view is not None:
            self._view.close()
            self._view = None
