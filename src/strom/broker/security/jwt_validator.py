"""Validation of the JSON Web Tokens OAUTHBEARER clients present (Kafka's
``BrokerJwtValidator`` and, when explicitly allowed, ``OAuthBearerUnsecuredValidator``).

A token is ``base64url(header).base64url(claims).base64url(signature)`` (RFC 7519 / 7515).
A signed token is checked against the configured public keys: a JSON Web Key Set file
(``sasl.oauthbearer.jwks.endpoint.url=file://…``, keys chosen by the header's ``kid``) and/or
a PEM file of public keys or certificates (``sasl.oauthbearer.public.keys.location``, every
key of the algorithm's family is tried). Only asymmetric algorithms are accepted (RS*, PS*,
ES*, EdDSA): an HMAC algorithm would let a public key be used as a shared secret. An unsigned
token (``alg`` ``none``, empty signature) is accepted only with
``sasl.oauthbearer.unsecured.tokens.allowed=true``.

Claims of a signed token, as Kafka requires them: ``exp`` and ``iat`` present (numbers),
``exp`` not passed and ``nbf`` (if any) reached, both within
``sasl.oauthbearer.clock.skew.seconds``; ``aud`` one of
``sasl.oauthbearer.expected.audience`` when set; ``iss`` equal to
``sasl.oauthbearer.expected.issuer`` when set; the principal from the
``sasl.oauthbearer.sub.claim.name`` claim (a non-empty string); the scopes from the
``sasl.oauthbearer.scope.claim.name`` claim (a space-separated string or a list). An
unsecured token is checked as Kafka's unsecured validator does: ``exp``, ``nbf`` and the
principal, not ``aud`` / ``iss``, ``iat`` optional.

The key files are re-read when their modification time or size changes (checked at most once
a second, on the event-loop thread that validates); a file that cannot be read then keeps the
previous keys and is logged. PyJWT and cryptography (the ``oauth`` extra) do the signature
checks; they are imported only when OAUTHBEARER is enabled.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from strom.common.errors import StromError

log = logging.getLogger("strom.broker.security")

ASYMMETRIC_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
                                   "ES256", "ES384", "ES512", "EdDSA"})
_RELOAD_CHECK_S = 1.0


class OAuthConfigError(StromError):
    """The OAUTHBEARER settings of a listener are unusable; the broker must not start."""


class InvalidToken(Exception):
    """A token was refused; ``str()`` says why (logged by the broker, never sent)."""


@dataclass(frozen=True, slots=True)
class ValidatedToken:
    principal: str
    scopes: frozenset[str]
    expires_ms: int  # exp, in milliseconds since the epoch
    issued_at_ms: int


@dataclass(frozen=True, slots=True)
class ClaimRules:
    audience: frozenset[str] = frozenset()
    issuer: str | None = None
    sub_claim: str = "sub"
    scope_claim: str = "scope"
    skew_s: int = 30


@dataclass(slots=True)
class _KeyFile:
    """One key file and the keys last read from it: ``(kid or None, algorithm family, key)``."""

    path: Path
    load: Callable[[bytes], list[tuple[str | None, str, Any]]]
    stamp: tuple[int, int] | None = None
    keys: list[tuple[str | None, str, Any]] = field(default_factory=list)

    def refresh(self, *, strict: bool) -> None:
        """Re-read the file if it changed. At start-up (``strict``) a problem raises; later
        it is logged once per change of the file and the previous keys stay in use."""
        stamp: tuple[int, int] | None = None
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp == self.stamp:
                return
            keys = self.load(self.path.read_bytes())
            if not keys:
                raise ValueError("no public key in it")
        except (OSError, ValueError) as exc:
            if strict:
                raise OAuthConfigError(f"OAUTHBEARER key file {self.path}: {exc}") from None
            # Do not retry (and log) until the file changes or comes back.
            self.stamp = stamp if stamp is not None else (-1, -1)
            log.error("OAUTHBEARER key file %s could not be re-read, keeping the %d keys "
                      "read before: %s", self.path, len(self.keys), exc)
            return
        self.stamp, self.keys = stamp, keys
        if not strict:
            log.info("OAUTHBEARER key file %s re-read: %d keys", self.path, len(keys))


class JwtValidator:
    """Checks tokens for one listener. Owned by the listener's SASL settings; used from the
    event-loop thread only (the key files are re-read in place)."""

    def __init__(self, key_files: Sequence[_KeyFile], rules: ClaimRules,
                 allow_unsecured: bool, clock: Callable[[], float] = time.time) -> None:
        if not key_files and not allow_unsecured:
            raise OAuthConfigError(
                "OAUTHBEARER needs the keys that sign tokens: set "
                "sasl.oauthbearer.jwks.endpoint.url (file://) or "
                "sasl.oauthbearer.public.keys.location, or (development only) "
                "sasl.oauthbearer.unsecured.tokens.allowed=true")
        for key_file in key_files:
            key_file.refresh(strict=True)
        self._key_files = list(key_files)
        self._rules = rules
        self._allow_unsecured = allow_unsecured
        self._clock = clock
        self._checked = clock()

    def validate(self, token: str) -> ValidatedToken:
        parts = token.split(".")
        if len(parts) != 3:
            raise InvalidToken("not a JWS compact serialization (three dot-separated parts)")
        header = _json_part(parts[0], "header")
        alg = header.get("alg")
        if alg == "none":
            if not self._allow_unsecured:
                raise InvalidToken("unsecured token (alg none) and "
                                   "sasl.oauthbearer.unsecured.tokens.allowed is false")
            if parts[2]:
                raise InvalidToken("unsecured token (alg none) with a signature")
            return self._check_claims(_json_part(parts[1], "claims"), signed=False)
        if alg not in ASYMMETRIC_ALGORITHMS:
            raise InvalidToken(f"algorithm {alg!r} is not accepted")
        return self._check_claims(self._verified_claims(token, str(alg), header.get("kid")),
                                  signed=True)

    def _keys(self) -> list[tuple[str | None, str, Any]]:
        now = self._clock()
        if now - self._checked >= _RELOAD_CHECK_S:
            self._checked = now
            for key_file in self._key_files:
                key_file.refresh(strict=False)
        return [key for key_file in self._key_files for key in key_file.keys]

    def _verified_claims(self, token: str, alg: str, kid: object) -> dict[str, Any]:
        import jwt

        family = _family(alg)
        candidates = [k for k in self._keys() if k[1] == family]
        if kid is not None and any(k[0] is not None for k in candidates):
            candidates = [k for k in candidates if k[0] in (kid, None)]
        if not candidates:
            raise InvalidToken(f"no configured key for algorithm {alg}"
                               + (f" and kid {kid!r}" if kid is not None else ""))
        for _, _, key in candidates:
            try:
                decoded = jwt.api_jws.decode_complete(token, key, algorithms=[alg])
            except jwt.InvalidSignatureError:
                continue
            except jwt.PyJWTError as exc:
                raise InvalidToken(f"malformed token: {exc}") from None
            return _json_object(decoded["payload"], "claims")
        raise InvalidToken("signature does not verify with any configured key")

    def _check_claims(self, claims: dict[str, Any], *, signed: bool) -> ValidatedToken:
        """Kafka's rules; an unsecured token (as Kafka's unsecured validator) needs no
        ``iat`` and its ``aud`` / ``iss`` are not checked."""
        rules, now = self._rules, self._clock()
        exp = _number(claims, "exp")
        iat = _number(claims, "iat") if signed or "iat" in claims else 0.0
        if now > exp + rules.skew_s:
            raise InvalidToken(f"token expired at {exp:.0f} (now {now:.0f})")
        nbf = claims.get("nbf")
        if nbf is not None and now + rules.skew_s < _number(claims, "nbf"):
            raise InvalidToken(f"token not valid before {nbf}")
        if rules.audience and signed:
            aud = claims.get("aud")
            given = {aud} if isinstance(aud, str) else set(aud) if isinstance(aud, list) else set()
            if not given & rules.audience:
                raise InvalidToken(f"audience {aud!r} is not one of "
                                   f"{sorted(rules.audience)}")
        if signed and rules.issuer is not None and claims.get("iss") != rules.issuer:
            raise InvalidToken(f"issuer {claims.get('iss')!r} is not {rules.issuer!r}")
        principal = claims.get(rules.sub_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise InvalidToken(f"no {rules.sub_claim!r} claim naming the principal")
        scope = claims.get(rules.scope_claim)
        scopes = scope.split() if isinstance(scope, str) else \
            [str(s) for s in scope] if isinstance(scope, list) else []
        return ValidatedToken(principal, frozenset(scopes), int(exp * 1000), int(iat * 1000))


def _family(alg: str) -> str:
    return {"R": "RSA", "P": "RSA", "E": "EC"}.get(alg[0], "OKP") if alg != "EdDSA" else "OKP"


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _json_part(text: str, what: str) -> dict[str, Any]:
    try:
        raw = _b64decode(text)
    except (binascii.Error, ValueError):
        raise InvalidToken(f"the {what} is not base64url") from None
    return _json_object(raw, what)


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        raise InvalidToken(f"the {what} is not JSON") from None
    if not isinstance(value, dict):
        raise InvalidToken(f"the {what} is not a JSON object")
    return value


def _number(claims: dict[str, Any], name: str) -> float:
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidToken(f"no numeric {name!r} claim")
    return float(value)


def _key_family(key: Any) -> str:
    from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

    if isinstance(key, rsa.RSAPublicKey):
        return "RSA"
    if isinstance(key, ec.EllipticCurvePublicKey):
        return "EC"
    if isinstance(key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
        return "OKP"
    raise ValueError(f"unsupported key type {type(key).__name__}")


def load_jwks(raw: bytes) -> list[tuple[str | None, str, Any]]:
    """The signature keys of a JSON Web Key Set (RFC 7517); other keys are skipped."""
    import jwt

    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        raise ValueError("not a JSON Web Key Set (not JSON)") from None
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ValueError("not a JSON Web Key Set (no \"keys\" list)")
    out: list[tuple[str | None, str, Any]] = []
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        try:
            key = jwt.PyJWK(entry).key
        except jwt.PyJWTError as exc:
            log.warning("JWKS key %s skipped: %s", entry.get("kid"), exc)
            continue
        if hasattr(key, "public_key"):
            key = key.public_key()  # a private JWK: only its public half is used
        out.append((entry.get("kid"), _key_family(key), key))
    return out


_PEM_BEGIN = b"-----BEGIN "


def load_pem_keys(raw: bytes) -> list[tuple[str | None, str, Any]]:
    """Every public key and certificate (its public key) in a PEM file."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    out: list[tuple[str | None, str, Any]] = []
    for chunk in raw.split(_PEM_BEGIN)[1:]:
        block = _PEM_BEGIN + chunk
        if chunk.startswith(b"CERTIFICATE-----"):
            key: Any = x509.load_pem_x509_certificate(block).public_key()
        elif chunk.startswith(b"PUBLIC KEY-----"):
            key = serialization.load_pem_public_key(block)
        else:
            kind = chunk.split(b"-----", 1)[0].decode("ascii", "replace")
            raise ValueError(f"unexpected PEM block {kind!r} (public keys and certificates "
                             "only)")
        out.append((None, _key_family(key), key))
    return out


def jwks_path(url: str) -> Path:
    """The file behind a ``file://`` JWKS URL."""
    parsed = urlparse(url)
    if parsed.scheme != "file":
        raise OAuthConfigError(
            f"sasl.oauthbearer.jwks.endpoint.url={url}: only file:// URLs are supported "
            "(download the provider's JWKS to a file, e.g. periodically; strom re-reads it "
            "when it changes)")
    return Path(unquote(parsed.path))


def jwt_validator(jwks_url: str | None, pem_location: str | None, rules: ClaimRules,
                  allow_unsecured: bool, *,
                  clock: Callable[[], float] = time.time) -> JwtValidator:
    """A validator from the listener's settings; OAuthConfigError when unusable."""
    files: list[_KeyFile] = []
    if jwks_url or pem_location:
        try:
            import cryptography  # noqa: F401
            import jwt  # noqa: F401
        except ImportError:
            raise OAuthConfigError(
                "OAUTHBEARER with signed tokens needs PyJWT and cryptography: "
                "pip install 'strom[oauth]'") from None
    if jwks_url:
        files.append(_KeyFile(jwks_path(jwks_url), load_jwks))
    if pem_location:
        files.append(_KeyFile(Path(pem_location), load_pem_keys))
    return JwtValidator(files, rules, allow_unsecured, clock)
