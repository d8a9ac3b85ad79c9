"""One TCP connection to one broker, with pipelined requests.

Requests get increasing correlation ids; each waits on its own future in ``_pending``, so any
number of coroutines may await responses concurrently. One reader task (owned by the
connection) reads frames and resolves the matching future. The broker answers a connection's
requests in order, but matching by correlation id does not rely on that.

On :meth:`Connection.open` the connection sends ApiVersions and keeps, per API, the highest
version both sides speak (:func:`strom.client.wire.negotiate`). A broker that does not know our
ApiVersions version answers UNSUPPORTED_VERSION in the v0 format (KIP-511); we then retry at the
version it advertises for ApiVersions, or v0.

With ``security`` (:class:`~strom.client.security.ClientSecurity`) the socket is TLS
(the broker's certificate checked, the client's own sent for mutual TLS) and, on a SASL
listener, :meth:`Connection.open` authenticates after ApiVersions (:mod:`strom.client.sasl`);
a refusal raises the broker's error. Re-authentication (KIP-368) is not done: a broker that
sets a session lifetime closes the connection when it ends, and callers reconnect.

When the socket fails or the broker closes it, every waiting request fails with
:class:`~strom.common.errors.NetworkError` and the connection is closed for good: callers (the
:class:`~strom.client.cluster.Cluster`) open a new one; :meth:`Connection.wait_closed` returns
then. A connect that the broker's host refuses (nothing listens on the port: the broker's
process is gone, or its listener closed) raises :class:`ConnectionRefused`, a
``NetworkError`` of its own, since it tells more than a timeout does.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import logging
import ssl
import struct
from typing import Any

from strom import __version__
from strom.client import sasl, wire
from strom.client.security import ClientSecurity
from strom.common.errors import (
    KafkaError,
    NetworkError,
    RequestTimedOutError,
    UnsupportedVersionError,
    error_for,
)
from strom.protocol import api
from strom.protocol.versions import ApiKey

log = logging.getLogger("strom.client.conn")

DEFAULT_REQUEST_TIMEOUT_S = 30.0
DEFAULT_CONNECT_TIMEOUT_S = 10.0
_INT16 = struct.Struct(">h")
_MAX_RESPONSE_BYTES = 1 << 30


#: The connect was refused (``ECONNREFUSED``): the broker's host answered, and nothing
#: listens on the port. A NETWORK_EXCEPTION like the others, of a class of its own.
ConnectionRefused: type[KafkaError] = type("ConnectionRefused", (NetworkError,), {
    "__doc__": "The connect was refused: nothing listens on the broker's port."})


class Connection:
    """A connection to the broker at ``host:port``.

    Lifecycle: create, ``await open()`` (connect + ApiVersions), use :meth:`request` from any
    number of coroutines of the same event loop, ``await close()``. Not thread-safe.
    ``node_id`` is the broker id when known (``-1`` for a bootstrap connection).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        node_id: int = -1,
        client_id: str | None = "strom",
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        security: ClientSecurity | None = None,
    ) -> None:
        self.host = host
        self.security = security
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.versions: dict[int, int] = {}
        self.broker_versions: dict[int, tuple[int, int]] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task[None] | None = None
        self._pending: dict[int, tuple[asyncio.Future[memoryview], int, int]] = {}
        self._correlation = itertools.count(1)
        self._closed_reason: str | None = None

    def __repr__(self) -> str:
        return f"<Connection {self.address} node={self.node_id}>"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def closed(self) -> bool:
        return self._closed_reason is not None or self._writer is None

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        return len(self._pending)

    async def open(self) -> Connection:
        """Connect and negotiate API versions; NetworkError if the broker cannot be reached."""
        context = None if self.security is None else self.security.ssl_context
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                self._reader, self._writer = await asyncio.open_connection(
                    self.host, self.port, ssl=context,
                    server_hostname=self.host if context else None)
        except ssl.SSLError as exc:
            raise NetworkError(f"TLS handshake with {self.address} failed: "
                               f"{exc.reason or exc}") from None
        except TimeoutError:
            raise NetworkError(
                f"could not connect to {self.address}: timed out after {self.connect_timeout_s}s"
            ) from None
        except ConnectionRefusedError as exc:
            raise ConnectionRefused(
                f"could not connect to {self.address}: {exc.strerror or exc}") from None
        except OSError as exc:
            raise NetworkError(
                f"could not connect to {self.address}: {exc.strerror or exc}"
            ) from None
        self._closed_reason = None
        self._read_task = asyncio.create_task(self._read_loop(), name=f"strom-conn-{self.address}")
        try:
            await self._negotiate()
            if self.security is not None and self.security.uses_sasl:
                await self._authenticate(self.security)
        except BaseException:
            await self.close()
            raise
        return self

    # -- requests ----------------------------------------------------------------------------
    def version(self, api_key: int, *, minimum: int | None = None) -> int:
        """The negotiated version of ``api_key``; UnsupportedVersionError if none."""
        return wire.pick_version(self.versions, api_key, self.address, minimum=minimum)

    async def request(
        self,
        api_key: int,
        fields: dict[str, Any],
        *,
        version: int | None = None,
        timeout_s: float | None = None,
        expect_response: bool = True,
    ) -> Any:
        """Send a request built from ``fields`` and return the decoded response message.

        With ``expect_response=False`` (Produce with acks=0) return None once it is written.
        """
        v = self.version(api_key) if version is None else version
        body = api.request(api_key, v, fields)
        raw = await self.send(api_key, v, body, timeout_s=timeout_s,
                              expect_response=expect_response)
        if raw is None:
            return None
        return api.decode_response(api_key, v, raw)

    async def send(
        self,
        api_key: int,
        version: int,
        body: bytes | bytearray | memoryview,
        *,
        expect_response: bool = True,
        timeout_s: float | None = None,
    ) -> memoryview | None:
        """Send an encoded request body; return the response body (None if none is expected)."""
        writer = self._writer
        if writer is None or self._closed_reason is not None:
            raise NetworkError(f"connection to {self.address} is closed"
                               + (f" ({self._closed_reason})" if self._closed_reason else ""))
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        header = wire.encode_request_header(api_key, version, correlation_id, self.client_id)
        future: asyncio.Future[memoryview] | None = None
        if expect_response:
            future = asyncio.get_running_loop().create_future()
            self._pending[correlation_id] = (future, api_key, version)
        try:
            writer.writelines(wire.frame(header, body))
            await writer.drain()
        except (OSError, RuntimeError) as exc:
            self._pending.pop(correlation_id, None)
            self._fail(f"write failed: {exc}")
            raise NetworkError(f"connection to {self.address} lost: {exc}") from None
        if future is None:
            return None
        timeout = self.request_timeout_s if timeout_s is None else timeout_s
        try:
            # Not asyncio.wait_for: on Python 3.11 it returns the result when the answer is
            # delivered in the same loop turn as the caller's cancel, dropping the cancel (a
            # heartbeat task cancelled by close() then heartbeated on). A cancel always wins.
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            self._pending.pop(correlation_id, None)
            raise RequestTimedOutError(
                f"{wire.api_name(api_key)} request to {self.address} got no response in "
                f"{timeout:g}s"
            ) from None
        finally:
            self._pending.pop(correlation_id, None)

    # -- lifecycle ---------------------------------------------------------------------------
    async def close(self) -> None:
        """Close the socket; waiting requests fail with NetworkError. Idempotent."""
        self._fail("closed by client")
        writer, self._writer = self._writer, None
        task, self._read_task = self._read_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def wait_closed(self) -> str:
        """Wait until the connection is closed — by the broker, a socket error, or
        :meth:`close` — and return why (an unopened connection: at once)."""
        task = self._read_task
        if task is not None and not task.done():
            await asyncio.wait([task])
        return self._closed_reason or "not open"

    def _fail(self, reason: str) -> None:
        if self._closed_reason is None:
            self._closed_reason = reason
        pending, self._pending = self._pending, {}
        for future, api_key, _version in pending.values():
            if not future.done():
                future.set_exception(NetworkError(
                    f"connection to {self.address} lost before the {wire.api_name(api_key)} "
                    f"response arrived: {reason}"
                ))
        if self._writer is not None:
            self._writer.close()

    async def _read_loop(self) -> None:
        reader = self._reader
        assert reader is not None
        try:
            while True:
                head = await reader.readexactly(4)
                size = int.from_bytes(head, "big", signed=True)
                if size < 4 or size > _MAX_RESPONSE_BYTES:
                    self._fail(f"invalid response frame size {size}")
                    return
                payload = memoryview(await reader.readexactly(size))
                correlation_id = wire.read_correlation_id(payload)
                entry = self._pending.pop(correlation_id, None)
                if entry is None:
                    log.debug("%s: dropping response to unknown correlation id %d",
                              self.address, correlation_id)
                    continue
                future, api_key, version = entry
                if future.done():
                    continue
                try:
                    future.set_result(wire.response_body(payload, api_key, version))
                except KafkaError as exc:
                    future.set_exception(exc)
        except asyncio.IncompleteReadError:
            self._fail("the broker closed the connection")
        except OSError as exc:
            self._fail(str(exc.strerror or exc))
        except asyncio.CancelledError:
            self._fail("closed by client")
            raise

    # -- SASL --------------------------------------------------------------------------------
    async def _authenticate(self, security: ClientSecurity) -> None:
        """SaslHandshake v1, then the mechanism's tokens in SaslAuthenticate requests; the
        broker's refusal raises its error (SASL_AUTHENTICATION_FAILED with its message)."""
        mechanism = security.sasl_mechanism
        handshake = await self.request(ApiKey.SASL_HANDSHAKE, {"mechanism": mechanism},
                                       timeout_s=self.connect_timeout_s)
        if handshake.error_code:
            raise error_for(handshake.error_code,
                            f"{self.address} does not offer SASL mechanism {mechanism} "
                            f"(it offers {', '.join(handshake.mechanisms) or 'none'})")
        token = None
        if security.oauth_token is not None and mechanism == "OAUTHBEARER":
            got = security.oauth_token()
            token = await got if inspect.isawaitable(got) else got
        client = sasl.mechanism_client(security, token)
        out: bytes | None = client.first()
        while out is not None:
            answer = await self.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": out},
                                        timeout_s=self.connect_timeout_s)
            if answer.error_code:
                raise error_for(answer.error_code, answer.error_message or
                                f"SASL {mechanism} authentication with {self.address} failed")
            out = client.respond(bytes(answer.auth_bytes or b""))

    # -- ApiVersions -------------------------------------------------------------------------
    async def _negotiate(self) -> None:
        version = wire.CLIENT_VERSIONS[ApiKey.API_VERSIONS][1]
        for _attempt in range(3):
            fields: dict[str, Any] = {}
            if version >= 3:
                fields = {"client_software_name": "strom",
                          "client_software_version": __version__}
            body = api.request(ApiKey.API_VERSIONS, version, fields)
            raw = await self.send(ApiKey.API_VERSIONS, version, body,
                                  timeout_s=self.connect_timeout_s)
            assert raw is not None
            error_code = _INT16.unpack_from(raw, 0)[0] if len(raw) >= 2 else -1
            if error_code == UnsupportedVersionError.code:
                # The broker answered in the v0 format with its own ranges (KIP-511).
                answer = api.decode_response(ApiKey.API_VERSIONS, 0, raw)
                theirs = {k.api_key: k.max_version for k in answer.api_keys}
                retry = min(theirs.get(ApiKey.API_VERSIONS, 0), version - 1)
                version = max(retry, 0)
                continue
            answer = api.decode_response(ApiKey.API_VERSIONS, version, raw)
            if answer.error_code:
                raise error_for(answer.error_code, f"ApiVersions to {self.address} failed")
            self.broker_versions = {
                k.api_key: (k.min_version, k.max_version) for k in answer.api_keys
            }
            self.versions = wire.negotiate(self.broker_versions)
            return
        raise UnsupportedVersionError(f"broker {self.address} rejected every ApiVersions version")
