"""``<data-dir>/meta.properties``: which cluster and node a data directory belongs to.

Kafka's format (Java properties)::

    version=1
    cluster.id=<base64 uuid>
    node.id=<int>

Written at first start; checked at every later start so a data directory is never opened by
a broker with another node id or for another cluster. The node id is checked before anything
else in the directory is read or written; a directory that has this file but no metadata yet
keeps the cluster id recorded here.
"""

from __future__ import annotations

import os
from pathlib import Path

from strom.common.errors import StromError

FILE_NAME = "meta.properties"


class MetaPropertiesError(StromError):
    """meta.properties is empty or incomplete, or names another node or cluster."""


def read(data_dir: Path) -> dict[str, str] | None:
    try:
        text = (data_dir / FILE_NAME).read_text("utf-8")
    except FileNotFoundError:
        return None
    values: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip()
    return values


def check(data_dir: Path, node_id: int) -> str | None:
    """Check an existing file against this node; return the cluster id it records (None
    without a file). Raises :class:`MetaPropertiesError` for an empty or incomplete file and
    for another node's directory."""
    existing = read(data_dir)
    if existing is None:
        return None
    missing = [key for key in ("cluster.id", "node.id") if not existing.get(key)]
    if missing:
        state = "empty" if not existing else f"incomplete (no {' and no '.join(missing)})"
        raise MetaPropertiesError(
            f"{data_dir / FILE_NAME} is {state}. It records which cluster and node this data "
            f"directory belongs to; if the directory is this broker's (node.id {node_id}), "
            "delete the file and it is written again at the next start")
    if existing["node.id"] != str(node_id):
        raise MetaPropertiesError(
            f"{data_dir / FILE_NAME} belongs to node.id {existing['node.id']}, "
            f"but this broker is node.id {node_id}"
        )
    return existing["cluster.id"]


def ensure(data_dir: Path, cluster_id: str, node_id: int) -> None:
    """Create meta.properties, or check that it matches this broker."""
    recorded = check(data_dir, node_id)
    if recorded is not None:
        if recorded != cluster_id:
            raise MetaPropertiesError(
                f"{data_dir / FILE_NAME} belongs to cluster {recorded}, not {cluster_id}")
        return
    path = data_dir / FILE_NAME
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(f"#strom\nversion=1\ncluster.id={cluster_id}\nnode.id={node_id}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
