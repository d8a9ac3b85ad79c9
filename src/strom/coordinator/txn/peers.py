"""Connections from this broker to other brokers' listeners, one per broker id, for the
transaction coordinator's inter-broker requests (WriteTxnMarkers to partition leaders,
KIP-890 verification to coordinators): opened on first use, reused while the broker keeps
its address, replaced after a failure (:meth:`PeerConnections.drop`). TLS / SASL come from
the inter-broker ``security`` settings. Owned by the broker's event-loop thread."""

from __future__ import annotations

from typing import NamedTuple

from strom.client.conn import Connection
from strom.client.security import ClientSecurity


class Leader(NamedTuple):
    """Where a broker listens (the leader of a partition, a coordinator)."""

    node_id: int
    host: str
    port: int


class PeerConnections:
    def __init__(self, client_id: str, request_timeout_s: float,
                 security: ClientSecurity | None = None) -> None:
        self._client_id = client_id
        self._timeout_s = request_timeout_s
        self._security = security
        self._connections: dict[int, Connection] = {}

    async def get(self, peer: Leader) -> Connection:
        """An open connection to ``peer`` (KafkaError / OSError if it cannot be opened)."""
        conn = self._connections.get(peer.node_id)
        if conn is not None and not conn.closed and (conn.host, conn.port) == (peer.host,
                                                                              peer.port):
            return conn
        if conn is not None:
            await conn.close()
        conn = Connection(peer.host, peer.port, node_id=peer.node_id,
                          client_id=self._client_id, request_timeout_s=self._timeout_s,
                          security=self._security)
        await conn.open()
        self._connections[peer.node_id] = conn
        return conn

    async def drop(self, node_id: int) -> None:
        """Forget (and close) the connection to ``node_id`` after a failed request."""
        stale = self._connections.pop(node_id, None)
        if stale is not None:
            await stale.close()

    async def close(self) -> None:
        for conn in self._connections.values():
            await conn.close()
        self._connections.clear()
