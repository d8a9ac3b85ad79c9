"""``strom cluster``: the cluster id, controller and brokers (DescribeCluster, or Metadata
from brokers without it), as kafka-cluster.sh cluster-id and kafka-metadata tools show them.

``strom cluster cluster-id`` prints ``Cluster ID: <id>`` only (kafka-cluster.sh cluster-id);
``strom cluster`` / ``strom cluster describe`` adds the controller and a broker table::

    Cluster ID: 5L6g3nShT-eMCtK--X86sw
    Controller: 0 (127.0.0.1:9092)
    ID  HOST       PORT  RACK
    0   127.0.0.1  9092  null
"""

from __future__ import annotations

import argparse

from strom.cli.client_props import add_client_config, admin_options
from strom.client.admin_types import ClusterDescription
from strom.client.sync import SyncAdminClient


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cluster", help="cluster id, controller and brokers (kafka-cluster)",
                       description="Describe the cluster: its id, controller and brokers.")
    p.add_argument("action", nargs="?", choices=("describe", "cluster-id"), default="describe",
                   help="describe (default): id, controller and brokers; cluster-id: the id "
                        "only")
    add_client_config(p, "admin")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with SyncAdminClient(**admin_options(args)) as admin:
        cluster = admin.describe_cluster()
    print(cluster_text(cluster, brokers=args.action == "describe"), end="")
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
