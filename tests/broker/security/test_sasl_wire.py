"""SASL on the wire, byte for byte (Kafka's SaslServerAuthenticator and KafkaApis rules):
what is served before authentication, handshake errors, v0 raw tokens, the failure delay."""

from __future__ import annotations

import time

from strom.common.errors import error_class
from strom.protocol.versions import ApiKey
from tests.broker.raw import RawClient
from tests.broker.security.conftest import SecureBroker

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def _code(name: str) -> int:
    return error_class(name).code


def closed(client: RawClient) -> bool:
    try:
        client.read_frame()
    except (ConnectionError, OSError):
        return True
    return False


def test_api_versions_offers_the_sasl_and_scram_apis(secure: SecureBroker) -> None:
    client = RawClient(secure.bootstrap("SASL_PLAINTEXT"))
    response = client.call(ApiKey.API_VERSIONS, 3, {"client_software_name": "raw",
                                                    "client_software_version": "1"})
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[17] == (0, 1) and ranges[36] == (0, 2)
    assert ranges[50] == (0, 0) and ranges[51] == (0, 0)
    client.close()


def test_nothing_else_is_served_before_authentication(secure: SecureBroker) -> None:
    client = RawClient(secure.bootstrap("SASL_PLAINTEXT"))
    client.send_frame(client.header(ApiKey.METADATA, 12) + b"\x01\x00\x00")
    assert closed(client)


def test_authenticate_before_handshake_closes(secure: SecureBroker) -> None:
    client = RawClient(secure.bootstrap("SASL_PLAINTEXT"))
    client.send_frame(client.header(ApiKey.SASL_AUTHENTICATE, 1) + b"\x00\x00\x00\x00")
    assert closed(client)


def test_unsupported_mechanism_lists_the_enabled_ones_then_closes(
        secure: SecureBroker) -> None:
    client = RawClient(secure.bootstrap("SASL_PLAINTEXT"))
    started = time.monotonic()
    response = client.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
    assert time.monotonic() - started >= 0.09  # connection.failed.authentication.delay.ms
    assert response.error_code == _code("UNSUPPORTED_SASL_MECHANISM")
    assert list(response.mechanisms) == MECHANISMS
    assert closed(client)


def test_sasl_requests_on_a_listener_without_sasl_are_illegal_state(
        secure: SecureBroker) -> None:
    client = RawClient(secure.bootstrap("PLAINTEXT"))
    handshake = client.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert handshake.error_code == _code("ILLEGAL_SASL_STATE")
    auth = client.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\x00a\x00b"})
    assert auth.error_code == _code("ILLEGAL_SASL_STATE")
    # The connection stays usable.
    assert client.call(ApiKey.METADATA, 12, {"topics": []}).brokers
    client.close()


def test_plain_v1_then_requests_are_served_and_a_second_handshake_is_illegal(
        secure: SecureBroker) -> None:
    client = RawClient(secure.bootstrap("SASL_PLAINTEXT"))
    assert client.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 0
    auth = client.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\x00alice\x00alice-pw"})
    assert (auth.error_code, auth.session_lifetime_ms) == (0, 0)
    port = int(secure.bootstrap("SASL_PLAINTEXT").rsplit(":", 1)[1])
    assert [b.port for b in client.call(ApiKey.METADATA, 12, {"topics": []}).brokers] == [port]
    again = client.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert again.error_code == _code("ILLEGAL_SASL_STATE")
    client.close()


def test_failed_authentication_is_delayed_answered_andclosed(secure: SecureBroker) -> None:
    client = RawClient(secure.bootstrap("SASL_PLAINTEXT"))
    client.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    started = time.monotonic()
    auth = client.call(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\x00alice\x00nope"})
    assert time.monotonic() - started >= 0.09  # connection.failed.authentication.delay.ms
    assert auth.error_code == _code("SASL_AUTHENTICATION_FAILED")
    assert auth.error_message == "Authentication failed: Invalid username or password"
    assert closed(client)


def test_handshake_v0_takes_raw_tokens(secure: SecureBroker) -> None:
    client = RawClient(secure.bootstrap("SASL_PLAINTEXT"))
    assert client.call(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}).error_code == 0
    client.send_frame(b"\x00alice\x00alice-pw")  # no request header
    assert client.read_frame() == b""
    assert client.call(ApiKey.METADATA, 12, {"topics": []}).brokers
    client.close()
    bad = RawClient(secure.bootstrap("SASL_PLAINTEXT"))
    bad.call(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})
    bad.send_frame(b"\x00alice\x00wrong")
    assert closed(bad)


def test_scram_rejects_a_forged_proof(secure: SecureBroker) -> None:
    import base64

    client = RawClient(secure.bootstrap("SASL_PLAINTEXT"))
    client.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})
    first = client.call(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"n,,n=bob,r=abc"})
    assert first.error_code == 0
    server_first = bytes(first.auth_bytes).decode()
    nonce = server_first.split(",")[0][2:]
    assert nonce.startswith("abc") and ",i=4096" in server_first
    proof = base64.b64encode(b"\x00" * 32).decode()
    final = f"c=biws,r={nonce},p={proof}".encode()
    auth = client.call(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": final})
    assert auth.error_code == _code("SASL_AUTHENTICATION_FAILED")
    assert auth.error_message == ("Authentication failed during authentication due to "
                                  "invalid credentials with SASL mechanism SCRAM-SHA-256")
    assert closed(client)

