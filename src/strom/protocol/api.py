"""Adapter over kafka-python's ``kafka.protocol`` for the control-plane APIs.

One message class per API key and direction, encodable at any version the schemas define.
Decoded objects keep unknown tagged fields. Only fields a caller sets explicitly are written as
tagged fields (kafka-python's rule), so handlers set a tagged field only when it differs from
its default — old librdkafka misparses others.

The data path (Produce, Fetch) does not come through here: see :mod:`strom.protocol.fast`.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from strom.common.errors import InvalidRequestError, UnsupportedVersionError
from strom.protocol.strict import check_request

Message = Any  # a kafka.protocol ApiMessage instance (untyped library)


@cache
def _classes() -> dict[tuple[int, str], type]:
    from kafka.protocol.api_message import ApiMessage

    from strom.protocol.versions import _all_subclasses

    table: dict[tuple[int, str], type] = {}
    for cls in _all_subclasses(ApiMessage):
        json = getattr(cls, "_json", None)
        if json and getattr(cls, "_class_version", None) is None and json.get("type") in (
            "request",
            "response",
        ):
            table.setdefault((int(json["apiKey"]), json["type"]), cls)
    return table


def request_class(api_key: int) -> Any:
    try:
        return _classes()[(api_key, "request")]
    except KeyError:
        raise UnsupportedVersionError(f"unknown api key {api_key}") from None


def response_class(api_key: int) -> Any:
    try:
        return _classes()[(api_key, "response")]
    except KeyError:
        raise UnsupportedVersionError(f"unknown api key {api_key}") from None


def decode_request(api_key: int, version: int, body: memoryview) -> Message:
    """Decode a request body; InvalidRequestError for anything malformed.

    The body is first checked against its schema (:mod:`strom.protocol.strict`): the library
    alone would accept a field running past the frame or a null the schema forbids.
    """
    cls = request_class(api_key)
    check_request(api_key, version, body)
    try:
        return cls.decode(body, version=version)
    except UnsupportedVersionError:
        raise
    except Exception as exc:  # the library raises many types on bad input
        raise InvalidRequestError(f"malformed {cls.__name__} v{version}: {exc}") from None


def decode_response(api_key: int, version: int, body: bytes | memoryview) -> Message:
    cls = response_class(api_key)
    try:
        return cls.decode(body, version=version)
    except Exception as exc:
        raise InvalidRequestError(f"malformed {cls.__name__} v{version}: {exc}") from None


def encode(message: Message, version: int) -> bytes:
    """Encode a request or response body (no header) at ``version``."""
    return bytes(message.encode(version=version))


def new_response(api_key: int, version: int, **fields: Any) -> Message:
    return response_class(api_key)(version=version, **fields)


def new_request(api_key: int, version: int, **fields: Any) -> Message:
    return request_class(api_key)(version=version, **fields)


def max_version(api_key: int) -> int:
    return int(request_class(api_key).max_version)


def _build(cls: Any, values: dict[str, Any], version: int) -> Any:
    fields = cls.fields
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        field = fields.get(name)
        if field is None:
            raise KeyError(f"{cls.__name__} has no field {name!r}")
        if value is not None and field.is_struct_array():
            value = [
                _build(field.data_class, v, version) if isinstance(v, dict) else v for v in value
            ]
        elif value is not None and field.is_struct() and isinstance(value, dict):
            value = _build(field.data_class, value, version)
        kwargs[name] = value
    return cls(version=version, **kwargs)


def response_structs(api_key: int, version: int, path: tuple[str, ...],
                     values: list[dict[str, Any]]) -> list[Any]:
    """The elements of the struct array at ``path`` (field names from the response's top
    level, e.g. ``("topics", "configs")``) built ahead: a list that many entries of one
    response share is then built once, not once per entry (:func:`response` takes built
    elements as they are). A CreateTopics v5+ answer of 100 topics lists about 40 configs
    for each; building them per topic was two thirds of its 26 ms."""
    cls = response_class(api_key)
    for name in path:
        cls = cls.fields[name].data_class
    return [_build(cls, value, version) for value in values]


def response(api_key: int, version: int, fields: dict[str, Any]) -> bytes:
    """Encode a response body from plain dicts and lists (nested structs as dicts).

    Fields absent from ``fields`` take their schema defaults; pass a tagged field only when
    its value differs from the default.
    """
    return encode(_build(response_class(api_key), fields, version), version)


def request(api_key: int, version: int, fields: dict[str, Any]) -> bytes:
    """Encode a request body from plain dicts (the client side of the adapter)."""
    return encode(_build(request_class(api_key), fields, version), version)
