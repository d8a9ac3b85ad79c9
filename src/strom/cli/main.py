"""Entry point of the ``strom`` command: parses arguments and dispatches to a sub-command.

Every sub-command module exposes ``register(subparsers)`` and a ``run(args) -> int``. Errors
reach the user as one clear line on stderr and a non-zero exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from strom import __version__
from strom.cli import broker_cmd
from strom.common.errors import KafkaError, StromError

COMMANDS = [broker_cmd]


def _optional_commands() -> list[object]:
    modules: list[object] = []
    for name in ("topics", "produce", "consume", "configs", "dump_log", "perf", "groups",
                 "pipeline", "delete_records", "get_offsets", "log_dirs", "api_versions",
                 "cluster", "transactions", "producers", "users", "acls",
                 "quotas", "leader_election", "reassign"):
        try:
            modules.append(__import__(f"strom.cli.{name}", fromlist=["register"]))
        except ImportError as exc:  # pragma: no cover - only while a module is missing
            if exc.name != f"strom.cli.{name}":
                raise
    return modules


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="strom", description="strom: a Kafka-compatible event-streaming platform."
    )
    parser.add_argument("--version", action="version", version=f"strom {__version__}")
    parser.add_argument("--log-level", default="WARNING",
                        help="logging level (DEBUG, INFO, WARNING, ERROR); default WARNING")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in [*COMMANDS, *_optional_commands()]:
        module.register(sub)  # type: ignore[attr-defined]
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except (KafkaError, StromError) as exc:
        print(f"strom {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"strom {args.command}: error: {exc.strerror or exc}"
              + (f": {exc.filename}" if exc.filename else ""), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
