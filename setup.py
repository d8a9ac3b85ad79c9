"""Build hook for the one optional C extension; everything else is declared in pyproject.toml.

``strom.storage._record_scan`` is the C twin of the produce path's record walk
(:mod:`strom.storage.log_validator`). It is optional: without a C compiler the build goes on
and the broker runs the pure-Python walk, which costs several times more CPU per record.
Build it in place in a source checkout with ``python setup.py build_ext --inplace``.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "strom.storage._record_scan",
            sources=["src/strom/storage/_record_scan.c"],
            optional=True,
        )
    ]
)
