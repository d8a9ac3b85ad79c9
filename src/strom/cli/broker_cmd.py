"""``strom broker``: run a broker in the foreground until SIGTERM / Ctrl-C.

Configuration precedence: built-in defaults < ``--config FILE`` (Java properties) <
``--set key=value`` < ``--listen`` / ``--data-dir`` / ``--broker-id`` / ``--zookeeper``.
Every broker key is listed by ``strom broker --help-config``.

In a cluster each broker runs ``strom broker --broker-id N --zookeeper HOST:PORT[,…][/chroot]``
(or ``broker.id`` / ``node.id`` and ``zookeeper.connect`` in its config file, Kafka's names).
``--broker-id`` sets both ``broker.id`` and ``node.id``, whatever the lower layers say.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import signal
import sys
import textwrap
from pathlib import Path

from strom.common.config import BROKER_KEYS, BrokerConfig
from strom.common.errors import InvalidConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("broker", help="run a broker",
                       description="Run a strom broker in the foreground.")
    p.add_argument("--listen", metavar="HOST:PORT",
                   help="address to listen on (default 127.0.0.1:9092; port 0 picks one)")
    p.add_argument("--data-dir", metavar="DIR", help="data directory (default ./strom-data)")
    p.add_argument("--broker-id", metavar="N", type=int,
                   help="this broker's id (broker.id / node.id; default 0)")
    p.add_argument("--zookeeper", metavar="HOST:PORT[,...][/CHROOT]",
                   help="keep the cluster's metadata in ZooKeeper (zookeeper.connect); "
                        "default: in the data directory, a single broker")
    p.add_argument("--config", metavar="FILE", help="broker config file (key=value lines)")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                   help="set any broker config key; repeatable")
    p.add_argument("--help-config", action="store_true",
                   help="list every broker config key with its default and exit")
    p.set_defaults(run=run)


def read_properties(path: str) -> dict[str, str]:
    """Java-properties style: ``key=value`` or ``key: value`` lines, ``#`` / ``!`` comments."""
    values: dict[str, str] = {}
    for number, raw in enumerate(Path(path).read_text("utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        for sep in ("=", ":"):
            if sep in line:
                key, value = line.split(sep, 1)
                values[key.strip()] = value.strip()
                break
        else:
            raise InvalidConfigError(f"{path}:{number}: expected key=value, got {raw!r}")
    return values


#: The cycle collector's thresholds once the broker has started (Python's are 700, 10, 10).
GC_THRESHOLDS = (10_000, 10, 100)


def build_config(args: argparse.Namespace) -> BrokerConfig:
    values: dict[str, object] = {}
    if args.config:
        values.update(read_properties(args.config))
    for item in args.set:
        if "=" not in item:
            raise InvalidConfigError(f"--set expects KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        values[key.strip()] = value.strip()
    if args.listen:
        values["listeners"] = f"PLAINTEXT://{args.listen}"
    if args.data_dir:
        values["log.dirs"] = args.data_dir
    if args.broker_id is not None:  # the flag wins over both names in the layers below
        values["node.id"] = values["broker.id"] = args.broker_id
    if args.zookeeper is not None:
        values["zookeeper.connect"] = args.zookeeper
    return BrokerConfig(values)


def print_config_help() -> None:
    for key in BROKER_KEYS.values():
        default = key.render(key.default)
        doc = textwrap.fill(key.doc, width=96, initial_indent="    ",
                            subsequent_indent="    ")
        head = textwrap.fill(f"{key.name}  ({key.type.name.lower()}, default {default})",
                             width=96, subsequent_indent="    ", break_on_hyphens=False)
        print(f"{head}\n{doc}")


def run(args: argparse.Namespace) -> int:
    if args.help_config:
        print_config_help()
        return 0
    config = build_config(args)
    return asyncio.run(_serve(config))


async def _serve(config: BrokerConfig) -> int:
    from strom.broker.server import BrokerServer

    server = BrokerServer(config)
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # from the start: a SIGTERM while starting
        loop.add_signal_handler(sig, stopping.set)  # (or right after) stops it cleanly
    starting = asyncio.ensure_future(server.start())
    stopped = asyncio.ensure_future(stopping.wait())
    await asyncio.wait({starting, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():  # the start is abandoned: what it took is released
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        print("strom broker stopped while starting", file=sys.stderr, flush=True)
        return 0
    stopped.cancel()
    starting.result()  # a failed start raises here
    # What the start made lives as long as the process (modules, protocol tables, config,
    # the logs opened so far): frozen, it is out of the cycle collector's reach, whose full
    # collections would otherwise walk it all and stop the event loop for tens of
    # milliseconds at a time. What later requests make mostly dies young, and a partition's
    # objects live as long as it: young collections every 10,000 allocations instead of 700,
    # and a full one at most every 100 of the older ones instead of 10 (a 1,000-topic burst
    # on 3 brokers: 14 full collections, 836 ms of pauses, against none) — measured in
    # docs/benchmarks.md, topic creation under load.
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    listeners = " ".join(f"{name}={host}:{port}" for name, (host, port) in server.bound.items())
    print(f"strom broker listening on {server.host}:{server.port} "
          f"(data in {server.data_dir}) listeners: {listeners}", flush=True)
    await stopping.wait()
    print("strom broker shutting down", file=sys.stderr, flush=True)
    await server.stop()
    return 0
