"""An embedded broker for tests: a real ``strom broker`` process on a free port.

The broker runs in a child process (so a test can kill -9 it, and the test's own event loop
and GIL stay free), with a temporary data directory unless one is given. ``bootstrap`` is the
address clients connect to. ``restart()`` keeps the data directory and the port.
``open_file_limit`` runs the broker as under ``ulimit -n N`` (soft and hard RLIMIT_NOFILE).
``preexec`` runs in the child between fork and exec, before that limit (e.g. entering a
network namespace: :meth:`strom.testing.chaos.netns.NetworkFabric.preexec`), on every start.
With ``listeners`` in ``config`` (several listeners, TLS, SASL) the broker binds those
instead of ``host:port``; ``bootstrap`` is then the inter-broker listener and
``bootstrap_of(name)`` any listener. With ``stall_seconds`` the broker runs through the test
hook :mod:`strom.testing.stall`, and ``stall()`` blocks its event loop that long.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType

START_TIMEOUT_S = 30.0


class EmbeddedBroker:
    def __init__(
        self,
        config: Mapping[str, object] | None = None,
        data_dir: str | Path | None = None,
        port: int = 0,
        host: str = "127.0.0.1",
        log_level: str = "WARNING",
        open_file_limit: int | None = None,
        preexec: Callable[[], None] | None = None,
        stall_seconds: float | None = None,
    ) -> None:
        self.config = dict(config or {})
        self.stall_seconds = stall_seconds
        self.open_file_limit = open_file_limit
        self.preexec = preexec
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="strom-"))
        self.host = host
        self.port = port
        self.log_level = log_level
        self.process: subprocess.Popen[str] | None = None
        self.output: list[str] = []
        #: listener name → bound (host, port), once started.
        self.listeners: dict[str, tuple[str, int]] = {}
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        """The broker process's pid while it runs (None when stopped or killed)."""
        return self.process.pid if self.process is not None else None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def bootstrap_of(self, listener: str) -> str:
        """The address of one named listener (a broker started with ``listeners`` in its
        config)."""
        host, port = self.listeners[listener]
        return f"{host}:{port}"

    def start(self) -> EmbeddedBroker:
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("broker already running")
        module = "strom" if self.stall_seconds is None else "strom.testing.stall"
        args = [sys.executable, "-m", module, "--log-level", self.log_level, "broker",
                "--data-dir", str(self.data_dir)]
        if "listeners" not in self.config:
            args += ["--listen", f"{self.host}:{self.port}"]
        for key, value in self.config.items():
            args += ["--set", f"{key}={value}"]
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        if self.stall_seconds is not None:
            env["STROM_TEST_STALL_S"] = str(self.stall_seconds)
        self.process = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
            preexec_fn=self._preexec_fn(),
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        assert self.process.stdout is not None
        while True:
            line = self.process.stdout.readline()
            if not line:
                code = self.process.wait()
                raise RuntimeError(
                    f"strom broker exited with {code} before listening:\n" + "".join(self.output)
                )
            self.output.append(line)
            if line.startswith("strom broker listening on "):
                for item in line.partition(" listeners: ")[2].split():
                    name, _eq, address = item.partition("=")
                    lhost, _, lport = address.rpartition(":")
                    self.listeners[name] = (lhost, int(lport))
                address = line.split("listening on ", 1)[1].split()[0]
                host, _, port = address.rpartition(":")
                self.host, self.port = host, int(port)
                break
            if time.monotonic() > deadline:
                self.process.kill()
                raise RuntimeError("strom broker did not start in time:\n" + "".join(self.output))
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        return self

    def _preexec_fn(self) -> Callable[[], None] | None:
        """What the child runs before exec: ``preexec``, then ``ulimit -n open_file_limit``."""
        hook, limit = self.preexec, self.open_file_limit
        if hook is None and limit is None:
            return None

        def apply() -> None:  # in the child, before exec
            if hook is not None:
                hook()
            if limit is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

        return apply

    def _drain(self) -> None:
        process = self.process
        if process is None or process.stdout is None:
            return
        for line in process.stdout:
            self.output.append(line)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait for a clean shutdown; returns the exit status."""
        process = self.process
        if process is None:
            return 0
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)  # a paused (SIGSTOP) broker must see it
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)
        self.process = None
        return process.returncode

    def stall(self) -> None:
        """Block the broker's event loop for ``stall_seconds`` (SIGUSR2 to the test hook);
        returns at once."""
        process = self.process
        if self.stall_seconds is None:
            raise RuntimeError("the broker was not started with stall_seconds")
        if process is None or process.poll() is not None:
            raise RuntimeError("the broker is not running")
        process.send_signal(signal.SIGUSR2)

    def kill(self) -> None:
        """kill -9: no shutdown at all, as in a crash."""
        process = self.process
        if process is not None:
            process.kill()
            process.wait()
            if self._reader is not None:
                self._reader.join(timeout=5)
            self.process = None

    def restart(self) -> EmbeddedBroker:
        self.stop()
        return self.start()

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
