"""``strom cluster``: the cluster id, controller and brokers (DescribeCluster, or Metadata
from brokers without it), as kafka-cluster.sh cluster-id and kafka-metadata tools show them;
and ``strom cluster up|down|status --data-dir DIR``, a development cluster of ZooKeeper and
N brokers on this machine (:mod:`strom.cli.local_cluster`).

``up`` prints the bootstrap servers on stdout (progress on stderr) and returns once every
broker serves, its processes running on after the command exits; ``down`` stops the brokers
(SIGTERM) and then ZooKeeper; ``status`` prints one line per process::

    ROLE       ID  PID    ADDRESS          ALIVE  CONTROLLER
    zookeeper  -   4711   127.0.0.1:40123  yes    -
    broker     0   4712   127.0.0.1:40125  yes    yes

``strom cluster cluster-id`` prints ``Cluster ID: <id>`` only (kafka-cluster.sh cluster-id);
``strom cluster`` / ``strom cluster describe`` adds the controller and a broker table::

    Cluster ID: 5L6g3nShT-eMCtK--X86sw
    Controller: 0 (127.0.0.1:9092)
    ID  HOST       PORT  RACK
    0   127.0.0.1  9092  null
"""

from __future__ import annotations

import argparse
from pathlib import Path

from strom.cli.client_props import add_client_config, admin_options
from strom.cli.common import UsageError, parse_key_values, positive
from strom.cli.local_cluster import LocalCluster, status_table
from strom.client.admin_types import ClusterDescription
from strom.client.sync import SyncAdminClient
from strom.common.config import BrokerConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cluster", help="describe a cluster; run one here (up/down/status)",
                       description="Describe the cluster (its id, controller and brokers), or "
                                   "run a development cluster of ZooKeeper and brokers on "
                                   "this machine.")
    p.add_argument("action", nargs="?", default="describe",
                   choices=("describe", "cluster-id", "up", "down", "status"),
                   help="describe (default): id, controller and brokers; cluster-id: the id "
                        "only; up / down / status: the cluster kept in --data-dir")
    local = p.add_argument_group("up / down / status")
    local.add_argument("--data-dir", metavar="DIR",
                       help="the local cluster's directory (state, logs, data)")
    local.add_argument("--brokers", type=positive, metavar="N",
                       help="up: number of brokers, ids 0..N-1 (default 3, or as before)")
    local.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                       help="up: a broker config key for every broker; repeatable, kept for "
                            "later restarts")
    local.add_argument("--broker-log-level", metavar="LEVEL",
                       help="up: the brokers' log level (default INFO, or as before)")
    local.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                       help="up: how long to wait for the cluster to serve; down: for each "
                            "process to stop before SIGKILL (default 60)")
    add_client_config(p, "admin")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.action in ("up", "down", "status"):
        return run_local(args)
    with SyncAdminClient(**admin_options(args)) as admin:
        cluster = admin.describe_cluster()
    print(cluster_text(cluster, brokers=args.action == "describe"), end="")
    return 0


def run_local(args: argparse.Namespace) -> int:
    if not args.data_dir:
        raise UsageError(f"strom cluster {args.action} needs --data-dir DIR")
    root = Path(args.data_dir).absolute()
    if args.action != "up":
        cluster = LocalCluster.load(root)
        if args.action == "down":
            cluster.down(args.timeout)
        else:
            print(status_table(cluster.status()), end="")
        return 0
    exists = (root / "cluster.json").exists()
    cluster = LocalCluster.load(root) if exists else LocalCluster(root)
    cluster.grow(args.brokers)
    cluster.settings.update(parse_key_values(args.set, "--set"))
    BrokerConfig(cluster.settings)  # a bad key is one error line before anything starts
    if args.broker_log_level:
        cluster.broker_log_level = args.broker_log_level.upper()
    cluster.save()
    cluster.up(args.timeout)
    print(cluster.bootstrap, flush=True)
    return 0


def cluster_text(cluster: ClusterDescription, *, brokers: bool = True) -> str:
    if cluster.cluster_id is None:
        lines = ["No cluster ID found. The broker is probably too old."]
    else:
        lines = [f"Cluster ID: {cluster.cluster_id}"]
    if brokers:
        by_id = {b.node_id: b for b in cluster.brokers}
        controller = by_id.get(cluster.controller_id)
        lines.append(f"Controller: {cluster.controller_id}"
                     + (f" ({controller.address})" if controller is not None else
                        " (unknown)" if cluster.controller_id < 0 else ""))
        rows = [("ID", "HOST", "PORT", "RACK")] + [
            (str(b.node_id), b.host, str(b.port), b.rack or "null") for b in cluster.brokers]
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
                  + "  " + row[3] for row in rows]
    return "\n".join(lines) + "\n"
