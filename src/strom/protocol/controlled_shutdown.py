"""ControlledShutdown (7), v1-3: a hand-written codec (kafka-python's schemas lack this
inter-broker API).

Wire format (Kafka's ``ControlledShutdownRequest.json`` / ``…Response.json``):

* request: ``broker_id`` int32; v2+: ``broker_epoch`` int64 (-1: unknown); v3 is flexible
  (a trailing tagged-field section).
* response: ``error_code`` int16, ``remaining_partitions``: array of (``topic_name``
  string, ``partition_index`` int32); v3 uses compact strings and arrays and tagged-field
  sections after each partition and at the end.

Sans-io: bytes in, values out. Malformed input raises :class:`InvalidRequestError`.
"""

from __future__ import annotations

from dataclasses import dataclass

from strom.common.errors import InvalidRequestError
from strom.protocol import primitives as p

#: First flexible version (request header v2, response header v1 from here on).
FLEXIBLE_FROM = 3
UNKNOWN_BROKER_EPOCH = -1


@dataclass(frozen=True, slots=True)
class ControlledShutdownRequest:
    broker_id: int
    broker_epoch: int = UNKNOWN_BROKER_EPOCH


@dataclass(frozen=True, slots=True)
class ControlledShutdownResponse:
    error_code: int
    remaining_partitions: tuple[tuple[str, int], ...] = ()


def encode_request(request: ControlledShutdownRequest, version: int) -> bytes:
    out = p.write_int32(request.broker_id)
    if version >= 2:
        out += p.write_int64(request.broker_epoch)
    if version >= FLEXIBLE_FROM:
        out += p.write_tagged_fields([])
    return out


def decode_request(body: bytes | memoryview, version: int) -> ControlledShutdownRequest:
    reader = p.Reader(body)
    broker_id = reader.int32()
    epoch = reader.int64() if version >= 2 else UNKNOWN_BROKER_EPOCH
    if version >= FLEXIBLE_FROM:
        reader.skip_tagged_fields()
    _end(reader, "request")
    return ControlledShutdownRequest(broker_id, epoch)


def encode_response(response: ControlledShutdownResponse, version: int) -> bytes:
    flexible = version >= FLEXIBLE_FROM

    def partition(item: tuple[str, int]) -> bytes:
        topic, index = item
        if flexible:
            return (p.write_compact_string(topic) + p.write_int32(index)
                    + p.write_tagged_fields([]))
        return p.write_string(topic) + p.write_int32(index)

    items = list(response.remaining_partitions)
    out = p.write_int16(response.error_code)
    if flexible:
        return out + p.write_compact_array(items, partition) + p.write_tagged_fields([])
    return out + p.write_array(items, partition)


def decode_response(body: bytes | memoryview, version: int) -> ControlledShutdownResponse:
    reader = p.Reader(body)
    flexible = version >= FLEXIBLE_FROM
    error_code = reader.int16()

    def partition(r: p.Reader) -> tuple[str, int]:
        topic = r.compact_string() if flexible else r.string()
        index = r.int32()
        if flexible:
            r.skip_tagged_fields()
        return topic, index

    items = reader.compact_array(partition) if flexible else reader.array(partition)
    if flexible:
        reader.skip_tagged_fields()
    _end(reader, "response")
    return ControlledShutdownResponse(error_code, tuple(items))


def _end(reader: p.Reader, what: str) -> None:
    if not reader.at_end():
        raise InvalidRequestError(f"ControlledShutdown {what}: {reader.remaining} bytes too many")
