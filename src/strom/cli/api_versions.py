"""``strom api-versions``: the API versions each broker serves, as
kafka-broker-api-versions.sh prints them (ApiVersions).

One block per broker (the API lines are indented with a tab)::

    127.0.0.1:9092 (id: 0 rack: null) -> (
        Produce(0): 3 to 11 [usable: 11],
        ...
        AddPartitionsToTxn(24): UNSUPPORTED,
        ...
    )

Each API the broker advertises shows its version range and, for APIs strom's client speaks,
the version the client uses (``[usable: N]``, or ``[unusable: node too old|new]`` when the
ranges do not meet). APIs strom's client speaks that the broker does not advertise are
listed as ``UNSUPPORTED``; an API key Kafka's schemas do not name is ``UNKNOWN(n)``. A broker
that cannot be reached is printed as ``… -> ERROR: <error>`` and makes the exit status 1.
"""

from __future__ import annotations

import argparse
import sys

from strom.cli.client_props import add_client_config, admin_options
from strom.client.admin_types import BrokerApiVersions
from strom.client.metadata import BrokerNode
from strom.client.sync import SyncAdminClient
from strom.client.wire import CLIENT_VERSIONS
from strom.common.errors import KafkaError
from strom.protocol.versions import api_name


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("api-versions", help="API versions each broker serves "
                                            "(kafka-broker-api-versions)",
                       description="Print the API version ranges of every broker.")
    add_client_config(p, "admin")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    failed = 0
    with SyncAdminClient(**admin_options(args)) as admin:
        for node in admin.describe_cluster().brokers:
            try:
                versions = admin.describe_api_versions(node.node_id)
            except KafkaError as exc:
                failed += 1
                print(f"{node_text(node)} -> ERROR: {exc}")
                continue
            print(f"{node_text(node)} -> {versions_text(versions)}")
    if failed:
        print(f"strom api-versions: error: {failed} broker(s) did not answer", file=sys.stderr)
        return 1
    return 0


def node_text(node: BrokerNode) -> str:
    """A broker as Kafka's ``Node.toString`` shows it."""
    return f"{node.host}:{node.port} (id: {node.node_id} rack: {node.rack or 'null'})"


def versions_text(versions: BrokerApiVersions) -> str:
    """The ``( … )`` block: one line per API key, in key order."""
    lines = {key: _line(key, low, high, versions.usable.get(key))
             for key, (low, high) in versions.ranges.items()}
    for key in CLIENT_VERSIONS:
        lines.setdefault(key, f"{_name(key)}: UNSUPPORTED")
    body = ",\n\t".join(lines[key] for key in sorted(lines))
    return f"(\n\t{body}\n)"


def _name(key: int) -> str:
    name = api_name(key)
    return f"{name}({key})" if name is not None else f"UNKNOWN({key})"


def _line(key: int, low: int, high: int, usable: int | None) -> str:
    text = f"{_name(key)}: {low}" if low == high else f"{_name(key)}: {low} to {high}"
    ours = CLIENT_VERSIONS.get(key)
    if usable is not None:
        return f"{text} [usable: {usable}]"
    if ours is None:
        return text
    return f"{text} [unusable: node too {'new' if low > ours[1] else 'old'}]"
