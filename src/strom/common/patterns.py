"""Regular expressions clients send the broker, compiled by RE2 (google-re2).

Kafka compiles KIP-848 subscription patterns with RE2/J; strom compiles every pattern a
request carries (those and ListTransactions' ``TransactionalIdPattern``) with RE2: matching
runs in linear time whatever the pattern, so no request can stall the broker's event loop.
Python's backtracking ``re`` took 0.55 s for ``(a+)+$`` against 24 a's and a b, doubling with
each further a. RE2 has no backreferences or lookaround: such a pattern is refused
(:class:`PatternError`), as Kafka refuses it for subscriptions.
"""

from __future__ import annotations

import functools
from typing import Any

import re2  # type: ignore[import-untyped]

#: What compiling an invalid pattern raises.
PatternError: type[Exception] = re2.error

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a client's bad pattern is its answer, not a log line


@functools.lru_cache(maxsize=1024)
def compile_pattern(text: str) -> Any:
    """``text`` compiled (``.fullmatch(s)`` / ``.search(s)`` as ``re``'s); PatternError if
    it is not a valid RE2 pattern."""
    return re2.compile(text, _OPTIONS)
