"""The operation history: invoke / completion pairing, thread safety, JSON lines."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from strom.testing.chaos.history import NEMESIS, History, Op, completions


def test_completions_carry_their_invoke_and_merge_its_value() -> None:
    history = History()
    invoke = history.invoke("p0", "send", {"value": "a"})
    done = history.complete(invoke, "ok", {"partition": 1, "offset": 7})
    assert (done.invoke_index, done.process, done.f) == (invoke.index, "p0", "send")
    assert done.value == {"value": "a", "partition": 1, "offset": 7}
    assert done.time >= invoke.time
    assert completions(history.ops) == {invoke.index: done}
    with pytest.raises(ValueError):
        history.complete(invoke, "invoke", {})
    assert history.nemesis("kill", {"node": 1}).process == NEMESIS


def test_appends_from_many_threads_get_unique_ordered_indexes() -> None:
    history = History()

    def work(name: str) -> None:
        for i in range(500):
            history.complete(history.invoke(name, "send", {"value": f"{name}-{i}"}), "info", {})

    threads = [threading.Thread(target=work, args=(f"p{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ops = history.ops
    assert [op.index for op in ops] == list(range(8 * 500 * 2))
    assert len(completions(ops)) == 8 * 500


def test_json_lines_round_trip(tmp_path: Path) -> None:
    history = History()
    invoke = history.invoke("p0", "send", {"value": "a"})
    history.complete(invoke, "info", {"error": "_MSG_TIMED_OUT"})
    history.event("r0", "ok", "poll", {"value": "a", "partition": 0, "offset": 3})
    path = history.write_jsonl(tmp_path / "h.jsonl")
    assert History.read_jsonl(path) == history.ops
    assert len(path.read_text().splitlines()) == 3
    with pytest.raises(ValueError):
        Op.from_json('{"index":0,"process":"p","type":"maybe","f":"x","value":{},'
                     '"time":0,"wall":0}')
