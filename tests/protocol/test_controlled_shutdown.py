"""ControlledShutdown's hand-written codec against bytes written out from Kafka's schema."""

from __future__ import annotations

import pytest

from strom.common.errors import InvalidRequestError
from strom.protocol import controlled_shutdown as cs


def test_request_bytes_per_version() -> None:
    request = cs.ControlledShutdownRequest(5, 0x0102)
    assert cs.encode_request(request, 1) == b"\x00\x00\x00\x05"
    assert cs.encode_request(request, 2) == b"\x00\x00\x00\x05" + bytes(6) + b"\x01\x02"
    v3 = b"\x00\x00\x00\x05" + bytes(6) + b"\x01\x02" + b"\x00"  # empty tagged fields
    assert cs.encode_request(request, 3) == v3
    assert cs.decode_request(v3, 3) == request
    assert cs.decode_request(b"\x00\x00\x00\x05", 1) == cs.ControlledShutdownRequest(5, -1)
    with pytest.raises(InvalidRequestError):
        cs.decode_request(v3 + b"\x00", 3)


def test_response_bytes_per_version() -> None:
    response = cs.ControlledShutdownResponse(0, (("t", 2),))
    v2 = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x00\x00\x00\x02"
    v3 = b"\x00\x00" + b"\x02" + b"\x02t" + b"\x00\x00\x00\x02" + b"\x00" + b"\x00"
    assert cs.encode_response(response, 2) == v2
    assert cs.encode_response(response, 3) == v3
    assert cs.decode_response(v2, 2) == cs.decode_response(v3, 3) == response
    assert cs.decode_response(cs.encode_response(cs.ControlledShutdownResponse(41), 3), 3) \
        == cs.ControlledShutdownResponse(41)
