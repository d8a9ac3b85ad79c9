"""SCRAM (RFC 5802, with RFC 7677's SHA-256 and Kafka's SHA-512): the key derivations both
sides share, and Kafka's text form of a stored credential.

Stored per user and mechanism: the salt, the iteration count, ``StoredKey = H(ClientKey)`` and
``ServerKey = HMAC(SaltedPassword, "Server Key")`` — enough to check a client's proof and
prove the server, never enough to log in as the user.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass

#: Kafka's mechanisms: name → (hashlib name, AlterUserScramCredentials mechanism code).
MECHANISMS: dict[str, tuple[str, int]] = {
    "SCRAM-SHA-256": ("sha256", 1),
    "SCRAM-SHA-512": ("sha512", 2),
}
MIN_ITERATIONS = 4096  # Kafka's ScramMechanism minimum
MAX_ITERATIONS = 16384  # Kafka's ScramMechanism maximum


def mechanism_by_code(code: int) -> str | None:
    return next((name for name, (_h, c) in MECHANISMS.items() if c == code), None)


def _hash(mechanism: str) -> str:
    return MECHANISMS[mechanism][0]


def hmac_digest(mechanism: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, _hash(mechanism)).digest()


def digest(mechanism: str, data: bytes) -> bytes:
    return hashlib.new(_hash(mechanism), data).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i): PBKDF2 with the mechanism's HMAC (SASLprep is not
    applied, as Kafka's ScramFormatter does not either)."""
    return hashlib.pbkdf2_hmac(_hash(mechanism), password.encode("utf-8"), salt, iterations)


def client_key(mechanism: str, salted: bytes) -> bytes:
    return hmac_digest(mechanism, salted, b"Client Key")


def server_key(mechanism: str, salted: bytes) -> bytes:
    return hmac_digest(mechanism, salted, b"Server Key")


@dataclass(frozen=True, slots=True)
class DerivedKeys:
    stored_key: bytes
    server_key: bytes


def derive(mechanism: str, salted: bytes) -> DerivedKeys:
    """StoredKey and ServerKey from a salted password."""
    return DerivedKeys(digest(mechanism, client_key(mechanism, salted)),
                       server_key(mechanism, salted))


def format_credential(salt: bytes, stored: bytes, server: bytes, iterations: int) -> str:
    """Kafka's ScramCredentialUtils text form."""
    b64 = base64.b64encode
    return (f"salt={b64(salt).decode()},stored_key={b64(stored).decode()},"
            f"server_key={b64(server).decode()},iterations={iterations}")


def parse_credential(text: str) -> tuple[bytes, bytes, bytes, int]:
    """(salt, stored key, server key, iterations) from Kafka's text form; ValueError if bad."""
    fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
    try:
        return (base64.b64decode(fields["salt"], validate=True),
                base64.b64decode(fields["stored_key"], validate=True),
                base64.b64decode(fields["server_key"], validate=True),
                int(fields["iterations"]))
    except (KeyError, ValueError) as exc:
        raise ValueError(f"malformed SCRAM credential ({exc})") from None
