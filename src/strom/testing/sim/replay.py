"""The command that replays one seed of the simulation."""

from __future__ import annotations


def replay_command(seed: int, bug: str | None = None) -> str:
    planted = f" --bug {bug}" if bug else ""
    return f"PYTHONPATH=src python -m strom.testing.sim --seed {seed}{planted} --verbose"
