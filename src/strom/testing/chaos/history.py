"""An operation history in the style of Jepsen: every operation a client (or the nemesis) runs
is recorded as an ``invoke`` and then exactly one completion.

Completion types (Jepsen's semantics):

- ``ok``: the operation certainly happened (a send's delivery report with partition and
  offset, a record a reader saw);
- ``fail``: the operation certainly did not happen (a send refused before any byte reached a
  broker, or refused by a broker with an error that means "not appended");
- ``info``: the outcome is unknown (timeout, connection lost, the run ended first). An
  ``info`` send may or may not be in the log: the checker must accept both.

Nemesis operations (faults) are recorded with process ``"nemesis"`` as ``info`` ops, a start
and an end, so a post-mortem shows what was done when.

Thread-safe: producers' delivery callbacks, readers and the nemesis append from their own
threads; ``index`` is the global order of appends. ``time`` is seconds since the history was
created (monotonic clock), ``wall`` the wall clock (for matching broker logs).

On-disk form (:meth:`History.write_jsonl`): one JSON object per line, the fields of
:class:`Op`; :meth:`History.read_jsonl` reads it back.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

OpType = Literal["invoke", "ok", "fail", "info"]
OP_TYPES: tuple[OpType, ...] = ("invoke", "ok", "fail", "info")
NEMESIS = "nemesis"


@dataclass(frozen=True, slots=True)
class Op:
    """One event of the history. ``f`` names the operation (``send``, ``poll``, ``kill``…);
    ``value`` holds its arguments / results (JSON-serialisable); a completion carries the
    ``index`` of its invoke in ``invoke_index`` (-1 for an invoke or a lone event)."""

    index: int
    process: str
    type: OpType
    f: str
    value: Mapping[str, Any]
    time: float
    wall: float
    invoke_index: int = -1

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, default=str)

    @staticmethod
    def from_json(line: str) -> Op:
        raw = json.loads(line)
        if raw["type"] not in OP_TYPES:
            raise ValueError(f"unknown op type {raw['type']!r}")
        return Op(index=int(raw["index"]), process=str(raw["process"]), type=raw["type"],
                  f=str(raw["f"]), value=dict(raw["value"]), time=float(raw["time"]),
                  wall=float(raw["wall"]), invoke_index=int(raw.get("invoke_index", -1)))


@dataclass
class History:
    """An append-only, thread-safe list of :class:`Op`."""

    _ops: list[Op] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _start: float = field(default_factory=time.monotonic)

    def _append(self, process: str, type_: OpType, f: str, value: Mapping[str, Any],
                invoke_index: int = -1) -> Op:
        with self._lock:
            op = Op(len(self._ops), process, type_, f, dict(value),
                    time.monotonic() - self._start, time.time(), invoke_index)
            self._ops.append(op)
            return op

    def invoke(self, process: str, f: str, value: Mapping[str, Any]) -> Op:
        """Record the start of an operation; complete it with :meth:`complete`."""
        return self._append(process, "invoke", f, value)

    def complete(self, invoke: Op, type_: OpType, value: Mapping[str, Any]) -> Op:
        """Record the outcome (``ok`` / ``fail`` / ``info``) of ``invoke``; ``value`` is merged
        over the invoke's value."""
        if type_ == "invoke":
            raise ValueError("a completion is ok, fail or info")
        return self._append(invoke.process, type_, invoke.f, {**invoke.value, **value},
                            invoke.index)

    def event(self, process: str, type_: OpType, f: str, value: Mapping[str, Any]) -> Op:
        """Record an instantaneous, already completed event (a record a reader saw)."""
        return self._append(process, type_, f, value)

    def nemesis(self, f: str, value: Mapping[str, Any] | None = None) -> Op:
        """Record a fault (or heal) the nemesis applied."""
        return self._append(NEMESIS, "info", f, value or {})

    @property
    def ops(self) -> list[Op]:
        """A snapshot of the operations so far, in order."""
        with self._lock:
            return list(self._ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def __len__(self) -> int:
        with self._lock:
            return len(self._ops)

    def write_jsonl(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text("".join(op.to_json() + "\n" for op in self.ops))
        return path

    @staticmethod
    def read_jsonl(path: str | Path) -> list[Op]:
        return [Op.from_json(line) for line in Path(path).read_text().splitlines() if line]


def completions(ops: list[Op]) -> dict[int, Op]:
    """invoke index → its completion (invokes without one are absent: still pending, which
    counts as ``info``)."""
    return {op.invoke_index: op for op in ops if op.type != "invoke" and op.invoke_index >= 0}
