"""``<data-dir>/meta.properties``: which cluster and node a data directory belongs to.

Kafka's format (Java properties)::

    version=1
    cluster.id=<base64 uuid>
    node.id=<int>

Written at first start; checked at every later start so a data directory is never opened by
a broker with another node id or for another cluster.
"""

from __future__ import annotations

import os
from pathlib import Path

from strom.common.errors import StromError

FILE_NAME = "meta.properties"


class MetaPropertiesError(StromError):
    """The data directory belongs to another node or cluster."""


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


def ensure(data_dir: Path, cluster_id: str, node_id: int) -> None:
    """Create meta.properties, or check that it matches this broker."""
    existing = read(data_dir)
    if existing is not None:
        if existing.get("node.id") != str(node_id):
            raise MetaPropertiesError(
                f"{data_dir / FILE_NAME} belongs to node.id {existing.get('node.id')}, "
                f"but this broker is node.id {node_id}"
            )
        if existing.get("cluster.id") != cluster_id:
            raise MetaPropertiesError(
                f"{data_dir / FILE_NAME} belongs to cluster {existing.get('cluster.id')}, "
                f"not {cluster_id}"
            )
        return
    path = data_dir / FILE_NAME
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(f"#strom\nversion=1\ncluster.id={cluster_id}\nnode.id={node_id}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
