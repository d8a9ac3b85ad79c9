"""Certificates reloaded without a restart: a TLS listener's keystore and truststore files are
polled (modification time and size) and a changed file rebuilds the listener's SSL context.

asyncio's server keeps the SSL context it was started with, so that context stays the
listener's *front* context and the swap happens per connection: its ``sni_callback`` runs on
every ClientHello (with or without a server name) and moves the new connection to the current
context (OpenSSL's ``SSL_set_SSL_CTX``: certificate, key and trust store). The files are
checked at most once a second, at a ClientHello, on the event-loop thread; connections already
open keep the certificate they were set up with.

A changed file that does not make a usable context (half written, wrong password, a key that
does not match) is logged as an error and the previous context stays in use; it is tried
again when the files change again. At start-up the same problems stop the broker
(:func:`~strom.broker.security.tls.server_context` fails closed).
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from collections.abc import Callable, Sequence

from strom.broker.security.tls import TlsConfigError

log = logging.getLogger("strom.broker.security")

CHECK_INTERVAL_S = 1.0
Stamp = tuple[int, int] | None  # (mtime_ns, size); None: the file cannot be read


class ReloadingContext:
    """The front context of one TLS listener and the current one behind it. Owned by the
    listener's runtime; used on the event-loop thread only."""

    def __init__(self, build: Callable[[], ssl.SSLContext], files: Sequence[str], name: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._build, self._files, self._name, self._clock = build, tuple(files), name, clock
        self._stamps = self._stat()
        self.front = build()  # raises TlsConfigError at start-up: fail closed
        self.current = self.front
        self._checked = clock()
        self.front.sni_callback = self._client_hello

    def _stat(self) -> tuple[Stamp, ...]:
        stamps: list[Stamp] = []
        for path in self._files:
            try:
                st = os.stat(path)
                stamps.append((st.st_mtime_ns, st.st_size))
            except OSError:
                stamps.append(None)
        return tuple(stamps)

    def _client_hello(self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None,
                      context: ssl.SSLContext) -> None:
        del server_name, context
        self.maybe_reload()
        if self.current is not self.front:
            connection.context = self.current

    def maybe_reload(self) -> bool:
        """Rebuild the context if a file changed (checked at most once a second); True when
        a new context is now current."""
        now = self._clock()
        if now - self._checked < CHECK_INTERVAL_S:
            return False
        self._checked = now
        stamps = self._stat()
        if stamps == self._stamps:
            return False
        self._stamps = stamps
        try:
            context = self._build()
        except TlsConfigError as exc:
            log.error("%s; the listener keeps its previous certificates until the files "
                      "change again", exc)
            return False
        self.current = context
        log.info("TLS listener %s: certificates reloaded from %s", self._name,
                 ", ".join(self._files))
        return True
