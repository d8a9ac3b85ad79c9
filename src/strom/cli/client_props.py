"""Client settings for the commands that talk to brokers, as Kafka's tools take them.

Every such command accepts ``--command-config FILE`` (a Java properties file, as Kafka's
``Utils.loadProps`` reads it); ``consume`` and ``produce`` also accept repeatable
``--consumer-property`` / ``--producer-property KEY=VALUE`` (alias ``--command-property``)
and the older ``--consumer.config`` / ``--producer.config`` spelling of the file option.
Precedence, lowest first: the client's defaults, the file, the ``--*-property`` options, then
the command's own flags when given (``--bootstrap-server``, ``--acks``, …) — Kafka's order.
:mod:`strom.client.properties` maps the merged keys to client arguments and refuses unknown
ones.

Properties file syntax (java.util.Properties): one ``key=value``, ``key: value`` or
``key value`` per line; blank lines and lines starting with ``#`` or ``!`` are skipped; a
line ending in an odd number of backslashes continues on the next; ``\\t``, ``\\n``,
``\\uXXXX`` and ``\\<char>`` escapes are decoded. Read as UTF-8 (Latin-1 when it is not).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from strom.cli.common import DEFAULT_BOOTSTRAP, UsageError, add_bootstrap, parse_key_values
from strom.client.properties import client_options

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_SEPARATORS = "=:"
_BLANKS = " \t\f"
_HEX = frozenset("0123456789abcdefABCDEF")


def add_client_config(parser: argparse.ArgumentParser, kind: str) -> None:
    """``--bootstrap-server``, ``--request-timeout-ms``, ``--command-config`` and, for the
    producer and consumer, ``--<kind>-property``. Flags left out stay None, so that
    :func:`client_settings` can tell them from values the user gave."""
    add_bootstrap(parser)
    parser.set_defaults(bootstrap_server=None, request_timeout_ms=None)
    names = ["--command-config"] + ([f"--{kind}.config"] if kind != "admin" else [])
    parser.add_argument(*names, dest="command_config", metavar="FILE",
                        help=f"a Java properties file of {kind} client settings (Kafka names, "
                             "e.g. client.id=…); unknown keys are an error")
    if kind != "admin":
        parser.add_argument(f"--{kind}-property", "--command-property", dest="client_property",
                            action="append", default=[], metavar="KEY=VALUE",
                            help=f"a {kind} client setting (Kafka name); repeatable, "
                                 "overrides --command-config")


def client_settings(
    args: argparse.Namespace, kind: str, flags: Mapping[str, str | None] | None = None
) -> dict[str, str]:
    """The merged Kafka properties for ``kind``: file, then ``--*-property``, then ``flags``
    (Kafka key → value of a flag the user gave; None for flags left out)."""
    merged: dict[str, str] = {}
    if args.command_config:
        merged.update(read_properties(args.command_config))
    merged.update(parse_key_values(getattr(args, "client_property", []),
                                   f"--{kind}-property"))
    merged.update({k: v for k, v in (flags or {}).items() if v is not None})
    if args.bootstrap_server is not None:
        merged["bootstrap.servers"] = args.bootstrap_server
    if args.request_timeout_ms is not None:
        merged["request.timeout.ms"] = str(args.request_timeout_ms)
    merged.setdefault("bootstrap.servers", DEFAULT_BOOTSTRAP)
    return merged


def admin_options(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments of :class:`~strom.client.sync.SyncAdminClient` for an admin command."""
    return client_options("admin", client_settings(args, "admin"))


def read_properties(path: str | Path) -> dict[str, str]:
    """The properties of a Java properties file; OSError when it cannot be read."""
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    return parse_properties(text, str(path))


def parse_properties(text: str, source: str = "properties") -> dict[str, str]:
    """Parse java.util.Properties text (see the module doc); later keys win."""
    out: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value = _split(line)
        if not key:
            raise UsageError(f"{source}: line {number} has a value but no key")
        out[_unescape(key, source, number)] = _unescape(value, source, number)
    return out


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, logical line) with continuations joined; comments dropped."""
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        number = index + 1
        line = lines[index].lstrip(_BLANKS)
        index += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and index < len(lines):
            line = line[:-1] + lines[index].lstrip(_BLANKS)
            index += 1
        if _continues(line):
            line = line[:-1]
        yield number, line


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split(line: str) -> tuple[str, str]:
    """The raw key and value of a logical line (escapes still in place)."""
    i = 0
    while i < len(line):
        char = line[i]
        if char == "\\":
            i += 2
            continue
        if char in _SEPARATORS or char in _BLANKS:
            break
        i += 1
    key, rest = line[:i], line[i:].lstrip(_BLANKS)
    if rest[:1] and rest[0] in _SEPARATORS:
        rest = rest[1:].lstrip(_BLANKS)
    return key, rest


def _unescape(text: str, source: str, number: int) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "\\" or i + 1 >= len(text):
            out.append(char)
            i += 1
            continue
        code = text[i + 1]
        if code == "u":
            digits = text[i + 2:i + 6]
            if len(digits) != 4 or any(d not in _HEX for d in digits):
                raise UsageError(f"{source}: line {number} has a malformed \\uXXXX escape "
                                 f"{text[i:i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(code, code))
        i += 2
    return "".join(out)
