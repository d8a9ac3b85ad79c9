"""Failed SASL logins against a real broker: a client guessing a user's password from one
address gets its budget of credential checks, then is refused unchecked (even with the right
password) for a growing back-off, while real clients — the same user from its own address
with confluent-kafka, another user with kafka-python — keep logging in and being served.
Attempts per second before and after are measured in bench/hostile_clients_bench.py."""

from __future__ import annotations

import socket
import struct

from confluent_kafka import Producer
from kafka import KafkaProducer

from strom.protocol import api
from strom.protocol.versions import ApiKey
from strom.testing import EmbeddedBroker

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
CONFIG = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config":
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";",
}


def plain_login(address: tuple[str, int], user: str, password: str,
                source: str) -> tuple[int, str]:
    """SaslHandshake v1 + SaslAuthenticate v2 on a new connection from ``source``."""
    with socket.create_connection(address, timeout=10, source_address=(source, 0)) as sock:
        def call(key: int, version: int, fields: dict[str, object], flexible: bool) -> object:
            header = struct.pack(">hhih", key, version, 1, 3) + b"raw" + (
                b"\x00" if flexible else b"")
            payload = header + api.request(key, version, fields)
            sock.sendall(struct.pack(">i", len(payload)) + payload)
            size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
            frame = sock.recv(size, socket.MSG_WAITALL)
            return api.decode_response(key, version, frame[5 if flexible else 4:])

        call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}, False)
        token = b"\x00" + user.encode() + b"\x00" + password.encode()
        answer = call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token}, True)
        return answer.error_code, answer.error_message or ""  # type: ignore[attr-defined]


def sasl(user: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": USERS[user]}


def test_a_password_guesser_is_slowed_and_real_clients_are_not() -> None:
    with EmbeddedBroker(CONFIG) as broker:
        address = broker.listeners["SASL_PLAINTEXT"]
        bootstrap = broker.bootstrap_of("SASL_PLAINTEXT")
        alice = Producer({"bootstrap.servers": bootstrap, **sasl("alice")})
        alice.produce("logins", b"before")
        assert alice.flush(15) == 0
        # 25 wrong passwords for alice from 127.0.0.2, one connection each.
        answers = [plain_login(address, "alice", f"guess-{i}", "127.0.0.2")
                   for i in range(25)]
        checked = [m for c, m in answers if "Invalid username or password" in m]
        refused = [m for c, m in answers if "credentials not checked" in m]
        assert all(code == 58 for code, _ in answers)  # SASL_AUTHENTICATION_FAILED
        # The budget (10), then at most one check per back-off (1 s, then 2 s, ...).
        assert 10 <= len(checked) <= 13 and len(checked) + len(refused) == 25
        # While backing off, not even the right password is checked.
        code, message = plain_login(address, "alice", USERS["alice"], "127.0.0.2")
        assert code == 58 and "credentials not checked" in message
        # alice from her own address and bob are served at once, by real clients.
        again = Producer({"bootstrap.servers": bootstrap, **sasl("alice")})
        again.produce("logins", b"after")
        assert again.flush(15) == 0
        bob = KafkaProducer(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT",
                            sasl_mechanism="PLAIN", sasl_plain_username="bob",
                            sasl_plain_password=USERS["bob"])
        bob.send("logins", b"bob").get(timeout=15)
        bob.close()
        assert any("failed to authenticate 10 times" in line for line in broker.output)
