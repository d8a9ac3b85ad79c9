"""Helpers shared by the client commands: common options, argument parsing, progress lines."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from collections.abc import Iterable, Mapping

from strom.common.config import ConfigKey, ignored_config_notes
from strom.common.errors import StromError

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


class UsageError(StromError):
    """A command-line value is invalid; reported as one line, exit status 1."""


def add_bootstrap(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server", "-b", metavar="HOST:PORT", default=DEFAULT_BOOTSTRAP,
        help=f"broker(s) to connect to, comma-separated (default {DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument(
        "--request-timeout-ms", type=int, default=30000, metavar="MS",
        help="how long to wait for each broker response (default 30000)",
    )


def parse_key_values(items: Iterable[str], what: str = "--config") -> dict[str, str]:
    """``["k=v", …]`` as a dict; UsageError naming ``what`` for an item without ``=``."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{what} expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def parse_int_list(text: str, what: str) -> list[int]:
    """``"0,1,2"`` as ``[0, 1, 2]`` (each ≥ 0; empty items skipped); UsageError naming
    ``what`` otherwise."""
    out: list[int] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if not item.isdigit():
            raise UsageError(f"{what} expects comma-separated integers ≥ 0, got {text!r}")
        out.append(int(item))
    return out


def warn_ignored_configs(keys: Mapping[str, ConfigKey], names: Iterable[str]) -> None:
    """Tell the user (on stderr, as kafka-configs.sh warns) about configs that strom accepts
    but ignores, such as ``message.format.version``."""
    for note in ignored_config_notes(keys, names):
        print(f"WARNING: {note}", file=sys.stderr)


def parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch from ``MS`` or ISO-8601 (a time without zone is UTC)."""
    stripped = text.strip()
    if stripped.lstrip("-").isdigit():
        return int(stripped)
    try:
        when = dt.datetime.fromisoformat(stripped)
    except ValueError:
        raise UsageError(
            f"invalid timestamp {text!r}: expected milliseconds since the epoch or ISO-8601 "
            "such as 2024-05-01T12:00:00Z"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def decode_escapes(text: str) -> str:
    r"""Interpret ``\t``, ``\n`` and friends in separator options (``--separator '\t'``)."""
    try:
        return text.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError:
        return text


def _int_at_least(low: int, what: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = low - 1
    if number < low:
        raise argparse.ArgumentTypeError(f"expected {what}, got {value!r}")
    return number


def positive(value: str) -> int:
    """argparse type: an integer ≥ 1."""
    return _int_at_least(1, "a positive integer", value)


def non_negative(value: str) -> int:
    """argparse type: an integer ≥ 0."""
    return _int_at_least(0, "an integer ≥ 0", value)


def acks_value(value: str) -> int:
    """argparse type for ``--acks``: 0, 1, -1 or all."""
    text = value.strip().lower()
    if text == "all":
        return -1
    if text in ("0", "1", "-1"):
        return int(text)
    raise argparse.ArgumentTypeError(f"expected 0, 1, -1 or all, got {value!r}")


class Progress:
    """Rate-limited progress lines on stderr (only when ``enabled``)."""

    def __init__(self, enabled: bool = True, interval_s: float = 5.0) -> None:
        self.enabled = enabled
        self.interval_s = interval_s
        self._next = time.monotonic() + interval_s

    def due(self) -> bool:
        if not self.enabled:
            return False
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.interval_s
        return True

    def say(self, message: str) -> None:
        if self.enabled:
            print(message, file=sys.stderr, flush=True)
