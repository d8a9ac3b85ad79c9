"""Types of the optional C extension built from ``_record_scan.c`` (see setup.py)."""

def scan(data: bytes | bytearray | memoryview, pos: int, end: int, count: int,
         collect_keyless: bool, /) -> tuple[int, int, list[int]]: ...
