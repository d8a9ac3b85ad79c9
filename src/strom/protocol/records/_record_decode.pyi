"""Types of the optional C extension built from ``_record_decode.c`` (see setup.py)."""

from typing import Any

def decode(data: bytes | bytearray | memoryview, pos: int, end: int, count: int,
           base_offset: int, base_timestamp: int, fixed_timestamp: int | None,
           cls: type[tuple[Any, ...]], template: tuple[Any, ...],
           slots: tuple[int, int, int, int, int], /) -> list[Any]: ...
