"""OffsetFetch (9), v1-9: committed offsets of one group (v1-7) or of several (v8+).

Null topics (v2+) mean every committed partition. No transactions yet, so
UNSTABLE_OFFSET_COMMIT never applies (``require_stable`` is accepted and has nothing to wait
for). Partitions without a commit answer offset -1 and no error.
"""

from __future__ import annotations

from typing import Any

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.state import BrokerState
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.OFFSET_FETCH


class OffsetFetchHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def _topics(self, group_id: str, topics: Any, version: int) -> list[dict[str, Any]]:
        wanted = None if topics is None else [
            (t.name, int(p)) for t in topics for p in t.partition_indexes]
        committed = self._state.groups.fetch_offsets(group_id, wanted)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for c in committed:
            by_topic.setdefault(c.topic, []).append({
                "partition_index": c.partition,
                "committed_offset": c.offset,
                "committed_leader_epoch": c.leader_epoch,
                "metadata": c.metadata,
                "error_code": 0,
            })
        return [{"name": name, "partitions": parts} for name, parts in by_topic.items()]

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        if version >= 8:
            groups = [
                {"group_id": g.group_id, "error_code": 0,
                 "topics": self._topics(g.group_id, g.topics, version)}
                for g in body.groups
            ]
            return [api.response(API_KEY, version, {"throttle_time_ms": 0, "groups": groups})]
        fields: dict[str, Any] = {
            "throttle_time_ms": 0,
            "topics": self._topics(body.group_id, body.topics, version),
            "error_code": 0,
        }
        return [api.response(API_KEY, version, fields)]
