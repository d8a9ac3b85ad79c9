"""The JWT rules of OAUTHBEARER (Kafka's BrokerJwtValidator) on real signed tokens: each claim
rule, algorithms that are never accepted, keys from a certificate, and key files re-read when
they change (a broken file keeps the previous keys)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from strom.broker.security.jwt_validator import (
    ClaimRules,
    InvalidToken,
    JwtValidator,
    OAuthConfigError,
    jwt_validator,
)
from tests.broker.security.certs import Certs
from tests.broker.security.tokens import AUDIENCE, ISSUER, Keys, jwt, make_keys, unsecured_token

RULES = ClaimRules(audience=frozenset({AUDIENCE}), issuer=ISSUER, skew_s=30)


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return make_keys(tmp_path)


def _validator(keys: Keys, clock: Clock | None = None, *, unsecured: bool = False,
               rules: ClaimRules = RULES) -> JwtValidator:
    return jwt_validator(keys.jwks_url, str(keys.pem), rules, unsecured,
                         clock=clock or time.time)


def test_a_valid_token_gives_principal_scopes_and_expiry(keys: Keys) -> None:
    token = _validator(keys).validate(keys.token("alice", scope="kafka read"))
    assert (token.principal, token.scopes) == ("alice", frozenset({"kafka", "read"}))
    assert abs(token.expires_ms / 1000 - (time.time() + 300)) < 5
    assert _validator(keys).validate(keys.token("bob", key="ec")).principal == "bob"


@pytest.mark.parametrize(("claims", "reason"), [
    ({"exp": None}, "no numeric 'exp' claim"),
    ({"iat": None}, "no numeric 'iat' claim"),
    ({"sub": None}, "no 'sub' claim"),
    ({"nbf": int(time.time()) + 600}, "not valid before"),
    ({"aud": ["other", "more"]}, "audience ['other', 'more'] is not one of ['strom']"),
    ({"iss": "https://evil.example"}, "issuer 'https://evil.example' is not"),
])
def test_claim_rules(keys: Keys, claims: dict[str, object], reason: str) -> None:
    with pytest.raises(InvalidToken, match=reason.replace("[", r"\[").replace("]", r"\]")):
        _validator(keys).validate(keys.token(**claims))  # type: ignore[arg-type]


def test_clock_skew_applies_to_expiry(keys: Keys) -> None:
    clock = Clock()
    validator = _validator(keys, clock)
    token = keys.token(lifetime_s=10)
    clock.now += 35  # 25 s past exp, within the 30 s skew
    assert validator.validate(token).principal == "alice"
    clock.now += 10
    with pytest.raises(InvalidToken, match="token expired"):
        validator.validate(token)


def test_other_claim_names(keys: Keys) -> None:
    rules = ClaimRules(sub_claim="client_id", scope_claim="scp")
    token = keys.token(client_id="svc-1", scp=["a", "b"])
    validated = _validator(keys, rules=rules).validate(token)
    assert (validated.principal, validated.scopes) == ("svc-1", frozenset({"a", "b"}))


def test_symmetric_and_unsigned_tokens_are_refused(keys: Keys) -> None:
    hmac_token = jwt.encode({"sub": "x", "exp": time.time() + 60, "iat": time.time()},
                            "s" * 32, algorithm="HS256")
    with pytest.raises(InvalidToken, match="algorithm 'HS256' is not accepted"):
        _validator(keys).validate(hmac_token)
    with pytest.raises(InvalidToken, match="unsecured token"):
        _validator(keys).validate(unsecured_token())
    assert _validator(keys, unsecured=True).validate(unsecured_token("u")).principal == "u"
    with pytest.raises(InvalidToken, match="three dot-separated parts"):
        _validator(keys).validate("abc")


def test_keys_from_a_certificate(certs: Certs, tmp_path: Path) -> None:
    """A PEM certificate's public key verifies tokens signed with its private key."""
    from cryptography.hazmat.primitives import serialization

    private = serialization.load_pem_private_key(
        certs.client_key.read_bytes(), password=None)
    validator = jwt_validator(None, str(certs.client_cert), ClaimRules(), False)
    token = jwt.encode({"sub": "c", "exp": time.time() + 60, "iat": time.time()}, private,
                       algorithm="RS256")
    assert validator.validate(token).principal == "c"


def test_a_rotated_jwks_is_read_and_a_broken_one_keeps_the_keys(keys: Keys,
                                                                tmp_path: Path) -> None:
    clock = Clock()
    validator = _validator(keys, clock)
    old_token = keys.token()
    (tmp_path / "other").mkdir()
    other = make_keys(tmp_path / "other")
    rotated = json.loads(other.jwks.read_text())
    keys.jwks.write_text(json.dumps(rotated))
    os.utime(keys.jwks, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert validator.validate(old_token).principal == "alice"  # checked at most once a second
    clock.now += 1.5
    assert validator.validate(other.token()).principal == "alice"
    with pytest.raises(InvalidToken, match="signature does not verify"):
        validator.validate(old_token)
    keys.jwks.write_text("{not json")
    clock.now += 1.5
    assert validator.validate(other.token()).principal == "alice"


def test_missing_or_empty_key_files_stop_the_start(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text('{"keys": []}')
    with pytest.raises(OAuthConfigError, match="no public key"):
        jwt_validator(empty.as_uri(), None, ClaimRules(), False)
    with pytest.raises(OAuthConfigError, match="only file:// URLs"):
        jwt_validator("https://idp.example/jwks", None, ClaimRules(), False)
    with pytest.raises(OAuthConfigError, match="No such file"):
        jwt_validator(None, str(tmp_path / "missing.pem"), ClaimRules(), False)
