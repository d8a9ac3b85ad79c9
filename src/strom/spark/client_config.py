"""``kafka.*`` options of the data source mapped onto strom's client settings.

Spark passes every ``kafka.``-prefixed option to its Kafka consumer or producer. strom does
the same for the settings its client has (names and units as in Kafka), refuses the ones
Spark's own Kafka source refuses (the source manages offsets and deserialisation itself), and
refuses security settings it cannot honour yet rather than silently connecting in plain text.
Any other key is ignored with a warning, as Kafka's clients log "supplied but isn't a known
config".
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from strom.common.errors import StromError

log = logging.getLogger(__name__)

# Spark's Kafka source throws IllegalArgumentException for these.
SOURCE_REFUSED = {
    "auto.offset.reset": "set 'startingOffsets' instead",
    "key.deserializer": "keys are always read as binary; cast them in a query",
    "value.deserializer": "values are always read as binary; cast them in a query",
    "enable.auto.commit": "the source does not commit through a consumer; "
                          "use 'commitOffsetsToGroup'",
    "interceptor.classes": "interceptors are not supported",
}
SINK_REFUSED = {
    "key.serializer": "keys are written as binary (string columns are UTF-8 encoded)",
    "value.serializer": "values are written as binary (string columns are UTF-8 encoded)",
}
# Settings that are accepted by Kafka clients but mean nothing for this data source.
IGNORED = frozenset({"group.id", "session.timeout.ms", "heartbeat.interval.ms",
                     "metadata.max.age.ms", "reconnect.backoff.ms", "retry.backoff.ms",
                     "client.dns.lookup", "receive.buffer.bytes", "send.buffer.bytes"})


class StromClientConfigError(StromError, ValueError):
    """A ``kafka.*`` option strom cannot honour."""


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """The client settings both sides use (picklable; defaults are Kafka's defaults)."""

    client_id: str = "strom-spark"
    request_timeout_ms: int = 30_000
    # reader
    fetch_max_bytes: int = 50 * 1024 * 1024
    max_partition_fetch_bytes: int = 4 * 1024 * 1024  # Kafka: 1 MiB; larger reads are cheaper
    fetch_max_wait_ms: int = 100
    # writer
    acks: int = -1
    compression: str = "none"
    linger_ms: float = 5.0
    # Kafka: 16 KiB. The writer fills every batch (its encoder cuts sections of this size),
    # and each batch costs a fixed amount on both sides: 256 KiB batches took about a fifth
    # less CPU per record than 64 KiB ones (writer and broker), well under max.message.bytes.
    batch_size: int = 262_144
    max_request_size: int = 1_048_576
    idempotent: bool = True
    max_in_flight: int = 5
    delivery_timeout_ms: int = 120_000
    transaction_timeout_ms: int = 60_000  # only the exactlyOnce writer uses it

    def producer_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :class:`strom.client.sync.SyncProducer`."""
        return {
            "acks": self.acks, "compression": self.compression, "linger_ms": self.linger_ms,
            "batch_size": self.batch_size, "max_request_size": self.max_request_size,
            "idempotent": self.idempotent, "max_in_flight": self.max_in_flight,
            "delivery_timeout_s": self.delivery_timeout_ms / 1000.0,
            "request_timeout_s": self.request_timeout_ms / 1000.0,
            "client_id": self.client_id,
        }


_COMMON = {"client.id": "client_id", "request.timeout.ms": "request_timeout_ms"}
_READER = {**_COMMON, "fetch.max.bytes": "fetch_max_bytes",
           "max.partition.fetch.bytes": "max_partition_fetch_bytes",
           "fetch.max.wait.ms": "fetch_max_wait_ms"}
_WRITER = {**_COMMON, "acks": "acks", "compression.type": "compression",
           "linger.ms": "linger_ms", "batch.size": "batch_size",
           "max.request.size": "max_request_size", "enable.idempotence": "idempotent",
           "max.in.flight.requests.per.connection": "max_in_flight",
           "delivery.timeout.ms": "delivery_timeout_ms",
           "transaction.timeout.ms": "transaction_timeout_ms"}
_COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")


def parse_reader_client_config(options: Mapping[str, str]) -> ClientConfig:
    """The reader's settings from ``kafka.*`` options (prefix already removed)."""
    return _parse(options, _READER, SOURCE_REFUSED)


def parse_writer_client_config(options: Mapping[str, str]) -> ClientConfig:
    """The writer's settings from ``kafka.*`` options (prefix already removed)."""
    config = _parse(options, _WRITER, SINK_REFUSED)
    if config.idempotent and config.acks != -1:
        if "enable.idempotence" in options:
            raise StromClientConfigError(
                "kafka.enable.idempotence=true needs kafka.acks=all (-1)")
        # Kafka's producer turns idempotence off by itself when acks is set lower.
        config = dataclasses.replace(config, idempotent=False)
    return config


def _parse(options: Mapping[str, str], known: Mapping[str, str],
           refused: Mapping[str, str]) -> ClientConfig:
    changes: dict[str, object] = {}
    for key, raw in options.items():
        name = key.lower()
        if name in refused:
            raise StromClientConfigError(f"option 'kafka.{name}' is not supported: "
                                         f"{refused[name]}")
        if name == "security.protocol" and raw.strip().upper() != "PLAINTEXT":
            raise StromClientConfigError(
                f"kafka.security.protocol={raw} is not supported yet (only PLAINTEXT)")
        if name.startswith(("ssl.", "sasl.")):
            raise StromClientConfigError(f"option 'kafka.{name}' is not supported yet "
                                         "(TLS and SASL come later)")
        field_name = known.get(name)
        if field_name is None:
            if name not in IGNORED and name != "security.protocol":
                log.warning("kafka.%s was supplied but isn't a setting strom's data source "
                            "uses; ignored", name)
            continue
        changes[field_name] = _value(field_name, name, raw)
    return dataclasses.replace(ClientConfig(), **changes)  # type: ignore[arg-type]


def _value(field_name: str, name: str, raw: str) -> object:
    text = raw.strip()
    if field_name == "client_id":
        return text
    if field_name == "compression":
        if text.lower() not in _COMPRESSION:
            raise StromClientConfigError(
                f"kafka.{name} must be one of {', '.join(_COMPRESSION)}, got {raw!r}")
        return text.lower()
    if field_name == "idempotent":
        if text.lower() not in ("true", "false"):
            raise StromClientConfigError(f"kafka.{name} must be true or false, got {raw!r}")
        return text.lower() == "true"
    if field_name == "acks":
        acks = {"all": -1, "-1": -1, "0": 0, "1": 1}.get(text.lower())
        if acks is None:
            raise StromClientConfigError(f"kafka.acks must be all, -1, 0 or 1, got {raw!r}")
        return acks
    try:
        number = float(text) if field_name == "linger_ms" else int(text)
    except ValueError as exc:
        raise StromClientConfigError(f"kafka.{name} must be a number, got {raw!r}") from exc
    minimum = 0 if field_name in ("linger_ms", "fetch_max_wait_ms") else 1
    if number < minimum:
        raise StromClientConfigError(f"kafka.{name} must be >= {minimum}, got {raw!r}")
    return number
