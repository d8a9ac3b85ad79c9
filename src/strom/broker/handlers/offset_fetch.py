"""OffsetFetch (9), v1-9: committed offsets of one group (v1-7) or of several (v8+).

Null topics (v2+) mean every committed partition. With ``require_stable`` (v7+) a partition
whose commit is in flight or part of an open transaction answers UNSTABLE_OFFSET_COMMIT (the
client retries until the transaction ends), as Kafka. Partitions without a commit answer
offset -1 and no error. Only committed offsets are returned (a commit whose write failed
never shows). A group whose partition is loading or not led here gets
COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR (v2+ at the group level, v1 in each
partition). Authorization: DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED, as a group
error) and on each topic (else TOPIC_AUTHORIZATION_FAILED in its partitions; left out when
every committed partition is asked for).
"""

from __future__ import annotations

from typing import Any

from strom.broker.access import GROUP_DENIED, TOPIC_DENIED
from strom.broker.dispatch import Request, ResponseParts
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.coordinator.group.model import CommittedOffset
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.OFFSET_FETCH


class OffsetFetchHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def _group(self, request: Request, group_id: str, topics: Any, version: int,
               require_stable: bool) -> tuple[int, list[dict[str, Any]]]:
        """(group error, topics) — on a group error v0-1 (no top-level error) carry it in
        every requested partition, as Kafka does; later versions list no topics."""
        access = self._state.access
        wanted = None if topics is None else [
            (t.name, int(p)) for t in topics for p in t.partition_indexes]
        committed: list[CommittedOffset] = []
        if not access.allowed(request, ResourceType.GROUP, group_id):
            error = GROUP_DENIED
        else:
            error, committed = self._state.groups.fetch_offsets(group_id, wanted,
                                                                require_stable)
        if not error:  # topics the caller may not DESCRIBE: refused, or left out of "all"
            described = {t: access.allowed(request, ResourceType.TOPIC, t)
                         for t in {c.topic for c in committed}}
            committed = [c if described[c.topic] else CommittedOffset(
                c.topic, c.partition, -1, -1, "", TOPIC_DENIED)
                for c in committed if wanted is not None or described[c.topic]]
        if error:
            if version >= 2 or wanted is None:
                return error, []
            committed = [CommittedOffset(t, p, -1, -1, "") for t, p in wanted]
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for c in committed:
            by_topic.setdefault(c.topic, []).append({
                "partition_index": c.partition,
                "committed_offset": c.offset,
                "committed_leader_epoch": c.leader_epoch,
                "metadata": c.metadata,
                "error_code": error or c.error,
            })
        return error, [{"name": name, "partitions": parts} for name, parts in by_topic.items()]

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        if version >= 8:
            groups = []
            for g in body.groups:
                error, topics = self._group(request, g.group_id, g.topics, version,
                                            bool(body.require_stable))
                groups.append({"group_id": g.group_id, "error_code": error, "topics": topics})
            return [api.response(API_KEY, version, {"throttle_time_ms": 0, "groups": groups})]
        error, topics = self._group(request, body.group_id, body.topics, version,
                                    version >= 7 and bool(body.require_stable))
        fields: dict[str, Any] = {"throttle_time_ms": 0, "topics": topics, "error_code": error}
        return [api.response(API_KEY, version, fields)]
