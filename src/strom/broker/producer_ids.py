"""Producer id allocation for InitProducerId (idempotent producers).

Ids are handed out from blocks of 1000 reserved in ``<data-dir>/producer-id-block`` (one line:
the next unreserved id), fsynced before any id of a new block is used, so ids are never reused
across restarts or crashes.
"""

from __future__ import annotations

import os
from pathlib import Path

BLOCK_SIZE = 1000
FILE_NAME = "producer-id-block"


class ProducerIdManager:
    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / FILE_NAME
        try:
            self._reserved_until = int(self._path.read_text().strip() or 0)
        except FileNotFoundError:
            self._reserved_until = 0
        self._next = self._reserved_until

    def next_id(self) -> int:
        if self._next >= self._reserved_until:
            self._reserve(self._next + BLOCK_SIZE)
        pid = self._next
        self._next += 1
        return pid

    def _reserve(self, until: int) -> None:
        tmp = self._path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            f.write(f"{until}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)
        self._reserved_until = until
