"""OffsetFetch (9), v1-10: committed offsets of one group (v1-7) or of several (v8+).

v10 (KIP-848) names topics by id, in the request and the answer: a requested id no topic has
answers its partitions UNKNOWN_TOPIC_ID; asked for every committed partition, a v10 answer
leaves out topics the metadata no longer holds (they have no id to be named by).
v9+ carry the member id and epoch of a KIP-848 member: checked as Kafka checks them
(UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH as the group's error; an admin's fetch, no member and
epoch -1, is not checked).

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
from strom.broker.handlers.group_common import by_topic_id
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import UnknownTopicIdError
from strom.coordinator.group.model import CommittedOffset
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.OFFSET_FETCH


class OffsetFetchHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def _group(self, request: Request, group_id: str, topics: Any, version: int,
               require_stable: bool, member: tuple[str, int] | None = None
               ) -> tuple[int, list[dict[str, Any]]]:
        """(group error, topics) — on a group error v0-1 (no top-level error) carry it in
        every requested partition, as Kafka does; later versions list no topics."""
        access = self._state.access
        image = self._state.store.image
        by_id = version >= 10
        unknown: list[dict[str, Any]] = []
        wanted: list[tuple[str, int]] | None = None
        if topics is not None and by_id:
            wanted = []
            for t in topics:
                name, topic_id = by_topic_id(image, t.topic_id)
                if name is not None:
                    wanted += [(name, int(p)) for p in t.partition_indexes]
                    continue
                unknown.append({"topic_id": topic_id, "partitions": [
                    {"partition_index": int(p), "committed_offset": -1,
                     "committed_leader_epoch": -1, "metadata": "",
                     "error_code": UnknownTopicIdError.code} for p in t.partition_indexes]})
        elif topics is not None:
            wanted = [(t.name, int(p)) for t in topics for p in t.partition_indexes]
        committed: list[CommittedOffset] = []
        if not access.allowed(request, ResourceType.GROUP, group_id):
            error = GROUP_DENIED
        else:
            error, committed = self._state.groups.fetch_offsets(group_id, wanted,
                                                                require_stable, member)
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
        if by_id:  # named by id: a topic the metadata no longer holds has none
            committed = [c for c in committed if c.topic in image.topics]
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for c in committed:
            by_topic.setdefault(c.topic, []).append({
                "partition_index": c.partition,
                "committed_offset": c.offset,
                "committed_leader_epoch": c.leader_epoch,
                "metadata": c.metadata,
                "error_code": error or c.error,
            })
        if not by_id:
            return error, [{"name": name, "partitions": parts}
                           for name, parts in by_topic.items()]
        return error, [{"topic_id": image.topics[name].topic_id, "partitions": parts}
                       for name, parts in by_topic.items()] + unknown

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        if version >= 8:
            groups = []
            for g in body.groups:
                member = ((g.member_id or "", int(g.member_epoch)) if version >= 9
                          else None)
                error, topics = self._group(request, g.group_id, g.topics, version,
                                            bool(body.require_stable), member)
                groups.append({"group_id": g.group_id, "error_code": error, "topics": topics})
            return [api.response(API_KEY, version, {"throttle_time_ms": 0, "groups": groups})]
        error, topics = self._group(request, body.group_id, body.topics, version,
                                    version >= 7 and bool(body.require_stable))
        fields: dict[str, Any] = {"throttle_time_ms": 0, "topics": topics, "error_code": error}
        return [api.response(API_KEY, version, fields)]
