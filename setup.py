"""Build hook for the optional C extensions; everything else is declared in pyproject.toml.

- ``strom.storage._record_scan`` is the C twin of the produce path's record walk
  (:mod:`strom.storage.log_validator`);
- ``strom.protocol.records._record_decode`` is the C twin of the record reader's loop
  (:func:`strom.protocol.records.reader.decode_record_tuples`, the client's consume path).

Both are optional: without a C compiler the build goes on and strom runs their pure-Python
twins, which cost several times more CPU per record. Build them in place in a source checkout
with ``python setup.py build_ext --inplace``.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "strom.storage._record_scan",
            sources=["src/strom/storage/_record_scan.c"],
            optional=True,
        ),
        Extension(
            "strom.protocol.records._record_decode",
            sources=["src/strom/protocol/records/_record_decode.c"],
            optional=True,
        ),
    ]
)
