"""Signing keys and JSON Web Tokens made at test time (no key material is committed): an RSA
key published in a JWKS file (kid ``rsa-1``), an EC P-256 key published as a PEM public key,
and a rogue RSA key nobody trusts."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

jwt = pytest.importorskip("jwt", reason="PyJWT (the oauth extra) makes the test tokens")

ISSUER = "https://issuer.example"
AUDIENCE = "strom"


@dataclass(frozen=True)
class Keys:
    rsa: Any
    ec: Any
    rogue: Any
    jwks: Path  # JWKS file with the RSA public key
    pem: Path  # PEM file with the EC public key

    @property
    def jwks_url(self) -> str:
        return self.jwks.as_uri()

    def token(self, sub: str = "alice", *, key: str = "rsa", lifetime_s: float = 300,
              **claims: Any) -> str:
        """A signed token; ``claims`` override the defaults (None removes one)."""
        now = int(time.time())
        body: dict[str, Any] = {"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "iat": now,
                                "exp": int(now + lifetime_s), "scope": "kafka"}
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        if key == "ec":
            return jwt.encode(body, self.ec, algorithm="ES256")
        signer = self.rogue if key == "rogue" else self.rsa
        return jwt.encode(body, signer, algorithm="RS256", headers={"kid": "rsa-1"})


def unsecured_token(sub: str = "alice", lifetime_s: float = 300) -> str:
    import base64

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    now = int(time.time())
    claims = {"sub": sub, "iat": now, "exp": now + int(lifetime_s)}
    return f"{part({'alg': 'none'})}.{part(claims)}."


def make_keys(directory: Path) -> Keys:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    rogue = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(rsa_key.public_key()))
    jwk.update({"kid": "rsa-1", "use": "sig", "alg": "RS256"})
    jwks = directory / "jwks.json"
    jwks.write_text(json.dumps({"keys": [jwk]}))
    pem = directory / "ec-public.pem"
    pem.write_bytes(ec_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return Keys(rsa_key, ec_key, rogue, jwks, pem)
