"""The harness's own read-only view of a cluster's ZooKeeper (Kafka's znode layout, see
:mod:`strom.metadata.zk_layout`): registered brokers, the controller, partition states; and
:class:`StateObserver`, a thread that records every partition state change it sees into the
history (``partition-state`` events, with the znode version so the checker knows when a
change may have been missed).

Every call has a timeout: kazoo's synchronous calls can block forever without a quorum."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from strom.metadata import zk_layout
from strom.testing.chaos.history import History

CALL_TIMEOUT = 5.0


class ZooKeeperView:
    def __init__(self, connect: str, timeout: float = 10.0) -> None:
        self.client = KazooClient(hosts=connect, timeout=timeout)
        self.client.start(timeout=timeout)

    def _get(self, path: str) -> tuple[bytes, int, float] | None:
        """The znode's data, version and mtime (seconds since the epoch), or None."""
        try:
            data, stat = self.client.get_async(path).get(timeout=CALL_TIMEOUT)
        except NoNodeError:
            return None
        return data, int(stat.version), stat.mtime / 1000

    def brokers(self) -> set[int]:
        """The ids of the registered (live) brokers."""
        try:
            children = self.client.get_children_async(zk_layout.BROKER_IDS).get(
                timeout=CALL_TIMEOUT)
        except NoNodeError:
            return set()
        return {int(child) for child in children}

    def controller(self) -> int:
        """The controller's broker id, -1 while there is none."""
        found = self._get(zk_layout.CONTROLLER)
        return int(json.loads(found[0])["brokerid"]) if found else -1

    def topic_id(self, topic: str) -> str | None:
        """The topic's id in Kafka's text form, from ``/brokers/topics/<t>`` (None: no such
        topic)."""
        found = self._get(zk_layout.topic_path(topic))
        return str(json.loads(found[0])["topic_id"]) if found else None

    def topic_replicas(self, topic: str) -> dict[int, tuple[int, ...]]:
        """partition → its replicas, from ``/brokers/topics/<t>`` (empty: no such topic)."""
        found = self._get(zk_layout.topic_path(topic))
        if not found:
            return {}
        _topic_id, assignment, _internal = zk_layout.decode_topic(found[0])
        return {p: replicas for p, (replicas, _adding, _removing) in assignment.items()}

    def topic_configs(self, topic: str) -> dict[str, str] | None:
        """The topic's config overrides, from ``/config/topics/<t>`` (None: no znode)."""
        found = self._get(zk_layout.topic_config_path(topic))
        return zk_layout.decode_config(found[0]) if found else None

    def partition_state(self, topic: str, partition: int) -> dict[str, object] | None:
        """``{"leader", "leader_epoch", "isr", "version", "mtime"}`` of the state znode (mtime:
        when ZooKeeper wrote it, seconds since the epoch), or None."""
        found = self._get(zk_layout.state_path(topic, partition))
        if found is None:
            return None
        state = json.loads(found[0])
        return {"leader": int(state["leader"]), "leader_epoch": int(state["leader_epoch"]),
                "isr": [int(b) for b in state["isr"]], "version": found[1],
                "mtime": found[2]}

    def wait_for(self, condition: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
        """Poll ``check`` until it holds; TimeoutError naming ``condition`` otherwise."""
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {condition}")
            time.sleep(0.05)

    def close(self) -> None:
        self.client.stop()
        self.client.close()


class StateObserver:
    """Polls the partitions' state znodes every ``interval`` seconds and records each new
    version as a ``partition-state`` event (process ``observer``)."""

    def __init__(self, connect: str, topic: str, partitions: Iterable[int], history: History,
                 interval: float = 0.05) -> None:
        self.view = ZooKeeperView(connect)
        self.topic, self.partitions = topic, list(partitions)
        self.history, self.interval = history, interval
        self._seen: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="chaos-observer")

    def start(self) -> StateObserver:
        self._thread.start()
        return self

    def poll_once(self) -> None:
        for partition in self.partitions:
            try:
                state = self.view.partition_state(self.topic, partition)
            except Exception:  # ZooKeeper unreachable for a moment: try again next time
                continue
            version = state["version"] if state is not None else None
            if state is not None and isinstance(version, int) \
                    and self._seen.get(partition) != version:
                self._seen[partition] = version
                self.history.event("observer", "ok", "partition-state",
                                   {"partition": partition, **state})

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll_once()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.view.close()
