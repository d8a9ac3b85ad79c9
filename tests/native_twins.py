"""Tests of code with an optional C twin run once per implementation.

The C extensions (``setup.py``) replace a Python function that stays as the fallback and the
specification; a module keeps the C function in an attribute that is None when it was not
built. :func:`choose_implementation` backs a fixture parametrized ``["native", "python"]``."""

from __future__ import annotations

from types import ModuleType

import pytest


def choose_implementation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
                          module: ModuleType, attribute: str) -> str:
    """Skip the "native" run when ``module.attribute`` is None (not built); for "python",
    set it to None for the test so the Python twin runs."""
    if request.param == "native":
        if getattr(module, attribute) is None:
            pytest.skip(f"{module.__name__}.{attribute} is not built "
                        "(python setup.py build_ext --inplace)")
    else:
        monkeypatch.setattr(module, attribute, None)
    return str(request.param)
