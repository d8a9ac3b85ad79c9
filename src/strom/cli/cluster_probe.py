"""Asking a running cluster how it is: which brokers a broker's Metadata lists, which broker
holds ``/controller`` in ZooKeeper, and waiting until every broker serves.

Used by ``strom cluster up`` / ``status`` and by :class:`strom.testing.cluster.EmbeddedCluster`.
The ``/controller`` znode is Kafka's: ``{"version":1,"brokerid":N,"timestamp":"…"}``,
ephemeral, under the cluster's chroot.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from strom.client.cluster import Cluster
from strom.common.errors import KafkaError, StromError

#: How long one probe may take (connect + ApiVersions + Metadata).
PROBE_TIMEOUT_S = 2.0
#: kazoo's own log of the probes' short sessions: dropped connections are expected here.
_KAZOO_LOG = logging.getLogger("strom.cli.kazoo")
_KAZOO_LOG.setLevel(logging.ERROR)


def brokers_listed(address: str, timeout: float = PROBE_TIMEOUT_S) -> set[int] | None:
    """The node ids the Metadata of the broker at ``address`` (``host:port``) lists, or None
    when it does not answer in time."""

    async def probe() -> set[int]:
        async with asyncio.timeout(timeout), Cluster(
                address, client_id="strom-cluster", request_timeout_s=timeout) as c:
            return set(c.metadata.brokers)

    try:
        return asyncio.run(probe())
    except (KafkaError, StromError, OSError, TimeoutError):
        return None


def wait_serving(addresses: Callable[[], Sequence[str]], count: int, timeout: float,
                 check: Callable[[], None] | None = None) -> None:
    """Wait until the Metadata of every broker in ``addresses()`` (asked again each round, so
    brokers may come and go) lists ``count`` brokers. ``check`` runs each round and may raise
    (a broker process that died). TimeoutError naming the brokers still missing."""
    deadline = time.monotonic() + timeout
    while True:
        if check is not None:
            check()
        seen = {address: brokers_listed(address) for address in addresses()}
        missing = {a: s for a, s in seen.items() if s is None or len(s) != count}
        if not missing:
            return
        if time.monotonic() > deadline:
            detail = ", ".join(f"{a} {'does not answer' if s is None else f'lists {sorted(s)}'}"
                               for a, s in missing.items())
            raise TimeoutError(f"the cluster did not serve {count} brokers in {timeout:g}s: "
                               f"{detail}")
        time.sleep(0.2)


def read_controller(connect: str, timeout: float = 5.0) -> int | None:
    """The broker id in ``/controller`` under ``connect``'s chroot (None when no broker is
    controller); TimeoutError when ZooKeeper does not answer."""
    data = _read_znode(connect, "/controller", timeout)
    return None if data is None else int(json.loads(data)["brokerid"])


def registered_brokers(connect: str, timeout: float = 5.0) -> set[int]:
    """The broker ids registered (``/brokers/ids/<id>``, ephemeral) under ``connect``'s
    chroot; TimeoutError when ZooKeeper does not answer."""
    children = _read_znode(connect, "/brokers/ids", timeout, children=True)
    return {int(c) for c in children or ()}


def wait_unregistered(connect: str, node_id: int, timeout: float) -> None:
    """Wait until broker ``node_id`` is not registered (a killed broker's registration stays
    until its ZooKeeper session expires, and a broker will not start while it does). A read
    that ZooKeeper does not answer in time (a server just started, on a loaded machine) is
    tried again until ``timeout``; TimeoutError after that."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if node_id not in registered_brokers(connect):
                return
        except TimeoutError:
            if time.monotonic() > deadline:
                raise
            continue
        if time.monotonic() > deadline:
            raise TimeoutError(f"broker {node_id} is still registered in ZooKeeper after "
                               f"{timeout:g}s (its old session has not expired)")
        time.sleep(0.2)


def _read_znode(connect: str, path: str, timeout: float, *, children: bool = False) -> Any:
    """A znode's data (or its children), None when it does not exist; one short session."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError
    from kazoo.handlers.threading import KazooTimeoutError

    hosts, slash, chroot = connect.partition("/")  # the chroot as a prefix: it may not
    client = KazooClient(hosts=hosts, timeout=timeout, logger=_KAZOO_LOG)  # exist yet
    try:
        client.start(timeout=timeout)
        call = client.get_children_async if children else client.get_async
        result = call(f"{slash}{chroot}{path}").get(timeout=timeout)
        return result if children else result[0]
    except NoNodeError:
        return None
    except KazooTimeoutError:
        raise TimeoutError(f"ZooKeeper at {connect} did not answer in {timeout:g}s") from None
    finally:
        client.stop()
        client.close()
