"""Principals: who a connection is, as Kafka's ``DefaultKafkaPrincipalBuilder`` names it.

``User:ANONYMOUS`` on PLAINTEXT and on TLS without a client certificate; ``User:<name>`` after
SASL; on TLS with a client certificate, the certificate's subject as an RFC 2253 name (most
specific part first: ``CN=alice,OU=eng,O=Example,C=US``, as Java's ``X500Principal.getName()``),
mapped by ``ssl.principal.mapping.rules``: a list of ``RULE:pattern/replacement/[LU]`` (the
first rule whose pattern matches the whole name wins; ``$1`` refers to groups; ``L`` / ``U``
change the case) and ``DEFAULT`` (the name unchanged); a name no rule applies to is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from strom.common.errors import StromError

ANONYMOUS = "User:ANONYMOUS"

# Attribute names OpenSSL reports → RFC 2253 / Java keywords.
_KEYWORDS = {
    "commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O",
    "localityName": "L", "stateOrProvinceName": "ST", "countryName": "C",
    "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID",
}
_RULE = re.compile(r"DEFAULT|RULE:((?:\\.|[^/\\])*)/((?:\\.|[^/\\])*)/([LU]?)")
_SPECIAL = re.compile(r'([,+"\\<>;])')


class PrincipalRulesError(StromError):
    """``ssl.principal.mapping.rules`` cannot be parsed."""


class NoMatchingRule(StromError):
    """No mapping rule applies to a client certificate's name: as in Kafka, the connection
    is refused (a list of rules without DEFAULT says which names are acceptable)."""


def rfc2253_name(peercert: dict[str, Any]) -> str | None:
    """The subject of a certificate as ``ssl.SSLSocket.getpeercert()`` returns it, in RFC 2253
    form; None without a subject."""
    subject = peercert.get("subject")
    if not subject:
        return None
    rdns = []
    for rdn in reversed(subject):  # the certificate lists the least specific part first
        rdns.append("+".join(f"{_KEYWORDS.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


def _escape(value: str) -> str:
    escaped = _SPECIAL.sub(r"\\\1", value)
    if escaped.startswith((" ", "#")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str
    case: str

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if not self.pattern.fullmatch(name):
            return None
        result = self.pattern.sub(self.replacement, name, count=1)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" \
            else result


class PrincipalMapper:
    """``ssl.principal.mapping.rules``, parsed once per listener."""

    def __init__(self, rules: str) -> None:
        self._rules: list[_Rule] = []
        text = rules.strip()
        position = 0
        while position < len(text):
            if text[position] in ", \t\n":
                position += 1
                continue
            match = _RULE.match(text, position)
            if match is None:
                raise PrincipalRulesError(
                    f"ssl.principal.mapping.rules: cannot parse {text[position:]!r} (expected "
                    "RULE:pattern/replacement/[LU] or DEFAULT)")
            if match.group(0) == "DEFAULT":
                self._rules.append(_Rule(None, "", ""))
            else:
                try:
                    pattern = re.compile(match.group(1))
                except re.error as exc:
                    raise PrincipalRulesError(
                        f"ssl.principal.mapping.rules: bad pattern {match.group(1)!r}: {exc}"
                    ) from None
                replacement = re.sub(r"\$(\d+)", r"\\g<\1>", match.group(2))
                self._rules.append(_Rule(pattern, replacement, match.group(3)))
            position = match.end()

    def principal(self, peercert: dict[str, Any] | None) -> str:
        """``User:<mapped name>`` for a verified client certificate, else ANONYMOUS."""
        name = rfc2253_name(peercert) if peercert else None
        if name is None:
            return ANONYMOUS
        for rule in self._rules:
            mapped = rule.apply(name)
            if mapped is not None:
                return f"User:{mapped}"
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule applies to {name!r}")
