"""Request dispatch: api key → handler, and the one place where failures become wire behaviour.

A handler receives a :class:`Request` and returns the response *body* as a list of parts
(``bytes``/``memoryview`` or file regions with a ``size``), ``None`` when no response is due
(Produce with acks=0), or an awaitable of either (parked Fetch, durable Produce); a
:class:`Dispatched` one when the request has taken effect and only its answer waits (a
Produce waiting for acknowledgements). The dispatcher adds the size prefix and the response
header.

Failure rules (Kafka's): an ApiVersions request above our range is answered in the v0 format
with UNSUPPORTED_VERSION and our ranges (KIP-511); any other unknown API or unsupported version,
and any malformed request, closes only that connection (:class:`CloseConnection`). Handlers
report per-topic / per-partition errors inside their responses. An unexpected exception is
logged once and closes the connection; it never crashes the broker.

Client quotas (:mod:`strom.broker.quotas`) are applied here, and only when some quota is
stored: Produce request bytes are recorded before the handler (its response carries the
throttle time), the handler's synchronous time after it, Fetch response bytes once the
response is complete; the largest throttle time (with any a handler set in
``Request.throttle_ms``: controller mutations) goes into the response's
``throttle_time_ms`` and mutes the connection for that long after the response is sent
(``ConnectionContext.mute_s``, KIP-219), or — for versions older than KIP-219 — holds the
response back for that long.

Storage failures: the storage boundary (the replica manager's writes, the metadata store)
turns a failed write into KafkaStorageError, reported once per episode by the data
directory's :class:`~strom.storage.health.LogDirHealth`, and handlers answer it in their
responses (``handlers.common.STORAGE_FAILURE_ANSWERS`` for APIs where Kafka answers another
code). An ``OSError`` that still escapes a handler is reported the same way (no traceback)
and closes only that connection.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from strom.broker.fetch_pacing import FetchPacer
from strom.broker.quotas import throttle as quota_throttle
from strom.broker.quotas.manager import FETCH, PRODUCE, REQUEST, ClientQuotas, user_of
from strom.broker.security.mechanisms import AuthenticationFailed
from strom.broker.security.principal import ANONYMOUS
from strom.broker.security.sasl import SaslSession
from strom.common.errors import KafkaError, UnsupportedVersionError
from strom.protocol.fast import ResponsePart
from strom.protocol.frame import RequestHeader, encode_response_header, parse_request_header
from strom.protocol.versions import ADVERTISED, SUPPORTED, ApiKey, response_header_version

log = logging.getLogger("strom.broker.dispatch")


Part = ResponsePart
ResponseParts = list[Part]
HandlerResult = ResponseParts | None | Awaitable[ResponseParts | None]


class CloseConnection(Exception):
    """Raised to close the current connection without a response."""


class Dispatched:
    """The answer still to come to a request that has taken effect already, in the order
    the requests came: a Produce whose records are appended and that waits only for its
    acknowledgements (the followers' fetches, a flush). The connection may process its next
    Produce meanwhile and still sends the answers in request order (two-phase processing:
    :mod:`strom.broker.network`). Anything whose effect comes after an ``await`` (a Produce
    waiting for a remote transaction verification before its append) is not one."""

    __slots__ = ("pending",)

    def __init__(self, pending: Awaitable[ResponseParts | None]) -> None:
        self.pending = pending

    def __await__(self) -> Generator[Any, None, ResponseParts | None]:
        return self.pending.__await__()


@dataclass(slots=True)
class ConnectionContext:
    """Per-connection facts handlers may need. ``listener`` is the name of the listener the
    connection came through (None: tests' direct dispatch); ``principal`` who it is
    (``User:ANONYMOUS`` until TLS or SASL says otherwise); ``sasl`` its SASL exchange on a
    SASL listener (None elsewhere). ``close_after_response``: close the connection once the
    response being sent is written (a refused handshake or authentication)."""

    peer: str
    client_id: str | None = None
    client_software: tuple[str, str] | None = None
    fetch_pacer: FetchPacer = field(default_factory=FetchPacer)
    extra: dict[str, Any] = field(default_factory=dict)
    listener: str | None = None
    principal: str = ANONYMOUS
    sasl: SaslSession | None = None
    close_after_response: bool = False
    #: Stop reading this connection for this long once the response is sent (a quota
    #: throttle, KIP-219); the connection resets it to 0 when it mutes.
    mute_s: float = 0.0


@dataclass(slots=True)
class Request:
    """``throttle_ms``: a quota throttle time the response carries (set by the dispatcher
    for Produce before the handler runs, by handlers for controller mutations).
    ``quota_exempt``: set by a handler when no client quota applies (a follower's Fetch)."""

    header: RequestHeader
    body: memoryview
    conn: ConnectionContext
    throttle_ms: int = 0
    quota_exempt: bool = False

    @property
    def version(self) -> int:
        return self.header.api_version


Handler = Callable[[Request], HandlerResult]
StorageFailure = Callable[[OSError, str], KafkaError]  # LogDirHealth.failure

_INT16 = struct.Struct(">h")

_SIZE = struct.Struct(">i")


def part_size(part: Part) -> int:
    if isinstance(part, bytes | memoryview | bytearray):
        return len(part)
    return part.size


def frame_response(header: RequestHeader, body: ResponseParts) -> ResponseParts:
    """Prefix the body with the frame size and the response header."""
    head = encode_response_header(
        header.correlation_id, response_header_version(header.api_key, header.api_version)
    )
    size = len(head) + sum(part_size(p) for p in body)
    if body and isinstance(body[0], bytes):
        return [_SIZE.pack(size) + head + body[0], *body[1:]]
    return [_SIZE.pack(size) + head, *body]


def unsupported_api_versions_response() -> bytes:
    """ApiVersions v0 body: UNSUPPORTED_VERSION and every range we advertise."""
    out = [_INT16.pack(UnsupportedVersionError.code), _SIZE.pack(len(ADVERTISED))]
    for key, (low, high) in sorted(ADVERTISED.items()):
        out.append(struct.pack(">hhh", key, low, high))
    return b"".join(out)


def _name(api_key: int) -> str:
    return ApiKey(api_key).name if api_key in ApiKey._value2member_map_ else (
        f"api key {api_key}")


_BEFORE_AUTH = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
#: Requests no client quota applies to (Kafka exempts authentication and cluster actions).
_QUOTA_EXEMPT = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE,
                           ApiKey.WRITE_TXN_MARKERS})


def raw_sasl_token(conn: ConnectionContext, sasl: SaslSession,
                   frame: memoryview) -> HandlerResult:
    """A SASL token sent without a request header (after SaslHandshake v0), answered as a
    size-prefixed token; a refusal closes the connection after the failure delay."""
    try:
        answer = sasl.authenticate(bytes(frame))
    except AuthenticationFailed as exc:
        return _close_later(sasl.settings.failure_delay_s, str(exc))
    if sasl.authenticated:
        conn.principal = f"User:{sasl.user}"
    return [_SIZE.pack(len(answer)) + answer]


def _check_session(conn: ConnectionContext, sasl: SaslSession, header: RequestHeader) -> None:
    """KIP-368 on an authenticated SASL connection: a SaslHandshake may begin
    re-authentication; any other request after the session's lifetime closes the
    connection (Kafka's ``serverAuthenticationSessionExpired``)."""
    if header.api_key == ApiKey.SASL_HANDSHAKE and sasl.begin_reauthentication():
        return
    if sasl.expired():
        raise CloseConnection(
            f"SASL session of {conn.principal} from {conn.peer} on listener {conn.listener} "
            f"expired ({sasl.session_lifetime_ms} ms) without re-authentication")


async def _close_later(delay_s: float, reason: str) -> ResponseParts | None:
    await asyncio.sleep(delay_s)
    raise CloseConnection(reason)


class Dispatcher:
    """Routes frames to handlers. One instance per broker; stateless between requests."""

    def __init__(self, handlers: dict[int, Handler],
                 storage_failure: StorageFailure | None = None,
                 quotas: ClientQuotas | None = None) -> None:
        missing = set(SUPPORTED) - set(handlers)
        extra = set(handlers) - set(SUPPORTED)
        if missing or extra:
            raise ValueError(f"handlers do not match versions.SUPPORTED: {missing=} {extra=}")
        self._handlers = handlers
        self._storage_failure = storage_failure
        self._quotas = quotas

    def dispatch(self, conn: ConnectionContext, frame: memoryview) -> HandlerResult:
        sasl = conn.sasl
        if sasl is not None and sasl.raw_tokens:
            return raw_sasl_token(conn, sasl, frame)
        try:
            header, position = parse_request_header(frame)
        except KafkaError as exc:
            raise CloseConnection(f"malformed request header: {exc}") from None
        if sasl is not None and sasl.authenticated:
            _check_session(conn, sasl, header)
        if sasl is not None and not sasl.authenticated and header.api_key not in _BEFORE_AUTH:
            # Kafka's SaslServerAuthenticator: IllegalSaslStateException, connection closed.
            raise CloseConnection(
                f"unexpected {_name(header.api_key)} request from {conn.peer} before SASL "
                f"authentication on listener {conn.listener}")
        if conn.client_id is None:
            conn.client_id = header.client_id
        supported = SUPPORTED.get(header.api_key)
        if supported is None or not supported[0] <= header.api_version <= supported[1]:
            if header.api_key == ApiKey.API_VERSIONS:
                return frame_response(
                    RequestHeader(header.api_key, 0, header.correlation_id, None, 1),
                    [unsupported_api_versions_response()],
                )
            raise CloseConnection(
                f"unsupported request {_name(header.api_key)} v{header.api_version} from "
                f"{conn.peer} "
                f"(client {header.client_id!r}); supported: {supported}"
            )
        request = Request(header, frame[position:], conn)
        quotas = self._quotas
        if quotas is not None and quotas.active and header.api_key not in _QUOTA_EXEMPT:
            return self._dispatch_with_quotas(quotas, request, len(frame))
        result = self._call(request)
        if result is None:
            return None
        if isinstance(result, list):
            return frame_response(header, result)
        if isinstance(result, Dispatched):
            return Dispatched(self._framed_later(header, result.pending))
        return self._framed_later(header, result)

    def _call(self, request: Request) -> HandlerResult:
        header = request.header
        conn = request.conn
        try:
            return self._handlers[header.api_key](request)
        except KafkaError as exc:
            raise CloseConnection(
                f"rejected {ApiKey(header.api_key).name} v{header.api_version} from {conn.peer}: "
                f"{exc}"
            ) from None
        except OSError as exc:
            raise self._storage_closes(header, exc) from None

    def _dispatch_with_quotas(self, quotas: ClientQuotas, request: Request,
                              size: int) -> HandlerResult:
        header = request.header
        user = user_of(request.conn.principal)
        client = header.client_id or ""
        throttle_s = 0.0
        if header.api_key == ApiKey.PRODUCE:
            throttle_s = quotas.record(PRODUCE, user, client, size)
            request.throttle_ms = round(throttle_s * 1000)
        started = time.perf_counter()
        result = self._call(request)
        spent = time.perf_counter() - started  # percent of a second: seconds * 100
        if not request.quota_exempt:
            throttle_s = max(throttle_s, quotas.record(REQUEST, user, client, spent * 100))
        if result is None:
            request.conn.mute_s = max(throttle_s, request.throttle_ms / 1000)
            return None
        if isinstance(result, list):
            return self._throttled(request, result, throttle_s)
        if isinstance(result, Dispatched):
            return Dispatched(self._throttled_later(request, result.pending, throttle_s))
        return self._throttled_later(request, result, throttle_s)

    async def _throttled_later(self, request: Request,
                               pending: Awaitable[ResponseParts | None],
                               throttle_s: float) -> ResponseParts | None:
        try:
            body = await pending
        except KafkaError as exc:
            raise CloseConnection(f"request failed: {exc}") from None
        except OSError as exc:
            raise self._storage_closes(request.header, exc) from None
        if body is None:
            return None
        framed = self._throttled(request, body, throttle_s)
        return framed if isinstance(framed, list) else await framed

    def _throttled(self, request: Request, body: ResponseParts,
                   throttle_s: float) -> ResponseParts | Awaitable[ResponseParts | None]:
        """Frame ``body`` with the throttle time: the connection mutes after sending it, or
        (a version before KIP-219) the response is held back for that long."""
        header = request.header
        if request.quota_exempt:
            return frame_response(header, body)
        if header.api_key == ApiKey.FETCH and self._quotas is not None:
            size = sum(part_size(p) for p in body)
            conn = request.conn
            throttle_s = max(throttle_s, self._quotas.record(
                FETCH, user_of(conn.principal), header.client_id or "", size))
        throttle_ms = max(round(throttle_s * 1000), request.throttle_ms)
        if throttle_ms <= 0:
            return frame_response(header, body)
        body = quota_throttle.with_throttle(header.api_key, header.api_version, body,
                                            throttle_ms)
        if quota_throttle.client_throttles(header.api_key, header.api_version):
            request.conn.mute_s = throttle_ms / 1000
            return frame_response(header, body)
        return self._held_back(frame_response(header, body), throttle_ms / 1000)

    @staticmethod
    async def _held_back(framed: ResponseParts, delay_s: float) -> ResponseParts:
        await asyncio.sleep(delay_s)
        return framed

    async def _framed_later(
        self, header: RequestHeader, pending: Awaitable[ResponseParts | None]
    ) -> ResponseParts | None:
        try:
            body = await pending
        except KafkaError as exc:
            raise CloseConnection(f"request failed: {exc}") from None
        except OSError as exc:
            raise self._storage_closes(header, exc) from None
        return None if body is None else frame_response(header, body)

    def _storage_closes(self, header: RequestHeader, exc: OSError) -> CloseConnection:
        api = ApiKey(header.api_key).name
        if self._storage_failure is None:
            return CloseConnection(f"{api} failed: {exc}")
        error = self._storage_failure(exc, f"serving {api}")
        return CloseConnection(f"{api} failed: {error.message}")
