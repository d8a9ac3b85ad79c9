"""ApiVersions (18), v0-4: the advertised ranges, from :mod:`strom.protocol.versions`
(``ADVERTISED``: what is served, with Produce listed from v0 as Kafka lists it), and from v3
the supported and finalized features (KIP-584) as Kafka 4.4 answers them (measured): v3
omits a supported feature whose minimum is 0 (KAFKA-17011), v4 lists it; a finalized feature
has its level as both minimum and maximum."""

from __future__ import annotations

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.state import BrokerState
from strom.protocol import api
from strom.protocol.versions import (
    ADVERTISED,
    FINALIZED_FEATURES,
    FINALIZED_FEATURES_EPOCH,
    SUPPORTED_FEATURES,
    ApiKey,
)

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
            fields: dict[str, object] = {"error_code": 0, "api_keys": self._keys,
                                         "throttle_time_ms": 0}
            if version >= 3:
                fields.update(_features(version))
            cached = api.response(API_KEY, version, fields)
            self._cache[version] = cached
        return [cached]


def _features(version: int) -> dict[str, object]:
    """The tagged feature fields of a v3+ answer (written only when not empty)."""
    supported = [{"name": name, "min_version": low, "max_version": high}
                 for name, (low, high) in sorted(SUPPORTED_FEATURES.items())
                 if version >= 4 or low > 0]
    finalized = [{"name": name, "min_version_level": level, "max_version_level": level}
                 for name, level in sorted(FINALIZED_FEATURES.items())]
    out: dict[str, object] = {}
    if supported:
        out["supported_features"] = supported
    if finalized:
        out["finalized_features_epoch"] = FINALIZED_FEATURES_EPOCH
        out["finalized_features"] = finalized
    return out
