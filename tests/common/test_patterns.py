"""Request patterns compile with RE2: Kafka's RE2/J dialect, linear-time matching."""

from __future__ import annotations

import pytest

from strom.common.patterns import PatternError, compile_pattern


def test_whole_matches_in_the_re2_dialect() -> None:
    pattern = compile_pattern("orders-(eu|us)")
    assert pattern.fullmatch("orders-eu") and not pattern.fullmatch("orders-eu-2")
    for bad in ("(", r"(a)\1", "(?=x)y"):  # RE2 has no backreferences or lookaround
        with pytest.raises(PatternError):
            compile_pattern(bad)


def test_a_pattern_that_backtracks_exponentially_in_re_is_answered() -> None:
    # Python's re takes hours for this; RE2 is linear (the test would hit its timeout).
    assert compile_pattern(r"(a+)+$").fullmatch("a" * 40 + "b") is None
