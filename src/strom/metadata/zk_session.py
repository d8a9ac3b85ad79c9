"""One ZooKeeper session through kazoo, with a deadline on every call and a worker thread.

kazoo's synchronous calls wait forever while the quorum is gone, and its multi-ops report
failures inside the result list instead of raising. :class:`ZkSession` fixes both: every call
goes through the async API and waits at most ``timeout`` seconds (then
:class:`ZooKeeperUnavailableError`), and :meth:`ZkSession.commit` raises
:class:`TransactionFailedError` naming the first failed operation.

Threads: kazoo runs its connection and callback threads; the session adds one worker thread
that runs the jobs handed to :meth:`ZkSession.submit` in order (watch handlers and
session-state reactions use it, so they may block on ZooKeeper without stalling kazoo).
An owner with an event loop passes ``run=loop.call_soon_threadsafe`` instead: the jobs then
run on its loop thread (each blocks it for a few ZooKeeper round trips at most), so every
method of the stores built on the session is called from that one thread.
:meth:`ZkSession.on_new_session` callbacks run on the worker after a session expired and a new
one was established (ephemeral znodes and watches must be re-created then); ``on_connected``
after every (re)connection.
"""

from __future__ import annotations

import logging
import queue
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.client import KazooClient, KazooState, TransactionRequest
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    NoNodeError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError

from strom.common.errors import StromError

log = logging.getLogger("strom.metadata.zookeeper")

DEFAULT_TIMEOUT = 10.0
DEFAULT_SESSION_TIMEOUT = 6.0


class ZooKeeperUnavailableError(StromError):
    """ZooKeeper did not answer in time, or the session or connection was lost mid-call."""


class TransactionFailedError(StromError):
    """A multi-op was refused: ``index`` is the failed operation, ``error`` kazoo's reason
    (``BadVersionError``, ``NodeExistsError``, ``NoNodeError``, …); nothing was changed."""

    def __init__(self, index: int, op: object, error: BaseException) -> None:
        super().__init__(f"ZooKeeper transaction refused at operation {index} ({op!r}): "
                         f"{type(error).__name__}")
        self.index = index
        self.op = op
        self.error = error


class ZkSession:
    """A started kazoo client and a worker thread; :meth:`close` ends both (and the session,
    which removes its ephemeral znodes)."""

    def __init__(self, connect: str, *, timeout: float = DEFAULT_TIMEOUT,
                 session_timeout: float = DEFAULT_SESSION_TIMEOUT,
                 run: Callable[[Callable[[], None]], object] | None = None) -> None:
        self.connect = connect
        self.timeout = timeout
        self.client = KazooClient(hosts=connect, timeout=session_timeout,
                                  connection_retry={"max_tries": -1, "max_delay": 1.0})
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._new_session_hooks: list[Callable[[], None]] = []
        self._connected_hooks: list[Callable[[], None]] = []
        self._lost = False
        self._closed = False
        self._run_elsewhere = run  # before start(): the listener submits on the first connect
        self.client.add_listener(self._on_state)
        try:
            with warnings.catch_warnings():  # the chroot is created below
                warnings.filterwarnings("ignore", message="No chroot path exists")
                self.client.start(timeout=timeout)
        except KazooTimeoutError:
            self.client.stop()
            self.client.close()
            raise ZooKeeperUnavailableError(
                f"could not connect to ZooKeeper at {connect} within {timeout}s") from None
        try:
            self._create_chroot()
        except BaseException:
            self.client.stop()
            self.client.close()
            raise
        self._worker = threading.Thread(target=self._run, name="strom-zk-worker", daemon=True)
        if run is None:
            self._worker.start()

    def _create_chroot(self) -> None:
        """The connect string's chroot (if any) and its parents, made from outside it."""
        chroot = self.client.chroot
        if not chroot:
            return
        self.client.chroot = ""
        try:
            self.ensure_path(chroot)
        finally:
            self.client.chroot = chroot

    def wait(self, result: Any, what: str) -> Any:
        """The value of kazoo async ``result`` (an ``IAsyncResult``), within the timeout."""
        try:
            return result.get(timeout=self.timeout)
        except KazooTimeoutError:
            raise ZooKeeperUnavailableError(
                f"ZooKeeper at {self.connect} did not answer {what} within "
                f"{self.timeout}s") from None
        except (ConnectionLoss, SessionExpiredError, ConnectionClosedError) as e:
            raise ZooKeeperUnavailableError(
                f"ZooKeeper at {self.connect}: {what} failed: {type(e).__name__}") from e

    def get(self, path: str, watch: Callable[..., None] | None = None) -> tuple[bytes, Any]:
        """``(data, stat)`` of ``path``; raises kazoo's ``NoNodeError`` when absent."""
        result: tuple[bytes, Any] = self.wait(self.client.get_async(path, watch), f"get {path}")
        return result

    def get_or_none(self, path: str, watch: Callable[..., None] | None = None
                    ) -> tuple[bytes, Any] | None:
        try:
            return self.get(path, watch)
        except NoNodeError:
            return None

    def exists(self, path: str, watch: Callable[..., None] | None = None) -> Any:
        return self.wait(self.client.exists_async(path, watch), f"exists {path}")

    def children(self, path: str, watch: Callable[..., None] | None = None) -> list[str]:
        """The children of ``path`` (none when it does not exist)."""
        try:
            names: list[str] = self.wait(self.client.get_children_async(path, watch),
                                         f"children of {path}")
        except NoNodeError:
            return []
        return names

    def get_many(self, paths: Sequence[str], watch: Callable[..., None] | None = None
                 ) -> list[tuple[bytes, Any] | None]:
        """Several reads pipelined (all sent, then all awaited); None for absent znodes."""
        pending = [self.client.get_async(path, watch) for path in paths]
        out: list[tuple[bytes, Any] | None] = []
        for path, result in zip(paths, pending, strict=True):
            try:
                out.append(self.wait(result, f"get {path}"))
            except NoNodeError:
                out.append(None)
        return out

    def ensure_path(self, path: str) -> None:
        """Create ``path`` and its missing parents (persistent, empty); racing is fine."""
        self.wait(self.client.ensure_path_async(path), f"create {path}")

    def transaction(self) -> TransactionRequest:
        return self.client.transaction()

    def commit(self, transaction: TransactionRequest, what: str) -> list[Any]:
        """Commit a multi-op; raises :class:`TransactionFailedError` (nothing changed) when
        one operation failed."""
        results: list[Any] = self.wait(transaction.commit_async(), what)
        for index, (op, result) in enumerate(zip(transaction.operations, results,
                                                 strict=True)):
            if isinstance(result, BaseException) and not isinstance(result, RolledBackError):
                raise TransactionFailedError(index, op, result)
        return results

    @property
    def closed(self) -> bool:
        return self._closed

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on the worker thread (or through ``run``), after the jobs submitted
        before it."""
        if self._run_elsewhere is not None:
            self._run_elsewhere(lambda: self._run_job(job))
        else:
            self._jobs.put(job)

    @property
    def connected(self) -> bool:
        """Connected to ZooKeeper in a live session now (False while the connection is down
        — the session may still live on the server — after it expired, and after close)."""
        return bool(self.client.state == KazooState.CONNECTED)

    def on_new_session(self, hook: Callable[[], None]) -> None:
        self._new_session_hooks.append(hook)

    def on_connected(self, hook: Callable[[], None]) -> None:
        self._connected_hooks.append(hook)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._jobs.put(None)
        if self._worker.is_alive() and threading.current_thread() is not self._worker:
            # The running job may finish while ZooKeeper is connected; while it is not (a
            # ZooKeeper gone), its call can only run out the timeout: stopping the client
            # below ends the session instead of waiting for that (a clean stop of a broker
            # without ZooKeeper took the whole timeout).
            self._worker.join(timeout=self.timeout if self.connected else 0.0)
        try:
            self.client.stop()
        finally:
            self.client.close()

    def _on_state(self, state: str) -> None:
        """kazoo's state listener (its callback thread): never blocks, hands work over."""
        if state == KazooState.LOST:
            self._lost = True
        elif state == KazooState.CONNECTED:
            expired, self._lost = self._lost, False
            self.submit(lambda: self._reconnected(expired))

    def _reconnected(self, expired: bool) -> None:
        hooks = (self._new_session_hooks if expired else []) + self._connected_hooks
        for hook in hooks:
            hook()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            self._run_job(job)

    def _run_job(self, job: Callable[[], None]) -> None:
        if self._closed:
            return
        try:
            job()
        except Exception:
            log.exception("ZooKeeper background job %r failed", job)

