"""The JAAS configuration text Kafka takes in ``sasl.jaas.config``::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret" user_alice="pw";

One login module: its class, a control flag, ``key=value`` options (values quoted with ``"``,
``\\`` escaping, or bare), ending with ``;``. For PLAIN the broker's users are the
``user_<name>`` options (Kafka's ``PlainServerCallbackHandler``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from strom.common.errors import StromError

_TOKEN = re.compile(r'\s*(?:([A-Za-z0-9_.$\-]+)\s*=\s*("(?:\\.|[^"\\])*"|[^\s;"]+)|(;)|(\S+))')
_FLAGS = ("required", "requisite", "sufficient", "optional")


class JaasConfigError(StromError):
    """``sasl.jaas.config`` cannot be parsed."""


@dataclass(frozen=True, slots=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str]

    def users(self) -> dict[str, str]:
        """PLAIN's users: ``user_<name>="<password>"`` options."""
        return {k[len("user_"):]: v for k, v in self.options.items()
                if k.startswith("user_") and len(k) > len("user_")}


def parse_jaas(text: str, key: str = "sasl.jaas.config") -> JaasEntry:
    words: list[str] = []
    options: dict[str, str] = {}
    ended = False
    for match in _TOKEN.finditer(text.strip()):
        name, value, semicolon, word = match.groups()
        if ended:
            raise JaasConfigError(f"{key}: one login module is expected, found more after ';'")
        if semicolon:
            ended = True
        elif name is not None and len(words) == 2:
            if value.startswith('"'):
                value = re.sub(r"\\(.)", r"\1", value[1:-1])
            options[name] = value
        elif word is not None and len(words) < 2 and not options:
            words.append(word)
        else:
            raise JaasConfigError(f"{key}: unexpected {match.group(0).strip()!r}")
    if len(words) != 2 or not ended:
        raise JaasConfigError(
            f"{key}: expected '<LoginModule class> required key=\"value\" … ;'")
    if words[1].lower() not in _FLAGS:
        raise JaasConfigError(f"{key}: control flag {words[1]!r} is not one of "
                              f"{', '.join(_FLAGS)}")
    return JaasEntry(words[0], words[1].lower(), options)
