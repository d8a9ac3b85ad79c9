"""ApiVersions (18), v0-4: the advertised ranges, from :mod:`strom.protocol.versions`
(``ADVERTISED``: what is served, with Produce listed from v0 as Kafka lists it)."""

from __future__ import annotations

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.state import BrokerState
from strom.protocol import api
from strom.protocol.versions import ADVERTISED, ApiKey

API_KEY = ApiKey.API_VERSIONS


class ApiVersionsHandler:
    def __init__(self, state: BrokerState) -> None:
        self._keys = [
            {"api_key": key, "min_version": low, "max_version": high}
            for key, (low, high) in sorted(ADVERTISED.items())
        ]
        self._cache: dict[int, bytes] = {}

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        if version >= 3:
            # v3+ carries the client's software name and version (KIP-511); keep them.
            body = api.decode_request(API_KEY, version, request.body)
            request.conn.client_software = (
                body.client_software_name or "", body.client_software_version or ""
            )
        cached = self._cache.get(version)
        if cached is None:
            cached = api.response(
                API_KEY, version, {"error_code": 0, "api_keys": self._keys, "throttle_time_ms": 0}
            )
            self._cache[version] = cached
        return [cached]
