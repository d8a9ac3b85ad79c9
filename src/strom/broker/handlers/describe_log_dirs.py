"""DescribeLogDirs (35), v1-5: the data directory, its partitions' sizes and free space (v5: never
cordoned — KIP-1066 cordons one of several directories, and strom has one)."""

from __future__ import annotations

import os
from typing import Any

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.DESCRIBE_LOG_DIRS


class DescribeLogDirsHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        if denied := self._state.access.check(request, ResourceType.CLUSTER):
            return [api.response(API_KEY, version, {"throttle_time_ms": 0,
                                                    "error_code": denied, "results": []})]
        replicas = self._state.replicas
        wanted: dict[str, set[int] | None] | None = None
        if body.topics is not None:
            wanted = {t.topic: set(t.partitions) for t in body.topics}
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for partition in replicas.partitions():
            topic, index = partition.tp
            if wanted is not None and (topic not in wanted or index not in (wanted[topic] or ())):
                continue
            by_topic.setdefault(topic, []).append({
                "partition_index": index,
                "partition_size": partition.size_in_bytes(),
                "offset_lag": 0,
                "is_future_key": False,
            })
        stat = os.statvfs(self._state.data_dir)
        result: dict[str, Any] = {
            "error_code": 0,
            "log_dir": str(self._state.data_dir.resolve()),
            "topics": [
                {"name": t, "partitions": sorted(ps, key=lambda p: int(p["partition_index"]))}
                for t, ps in sorted(by_topic.items())
            ],
            "total_bytes": stat.f_blocks * stat.f_frsize,
            "usable_bytes": stat.f_bavail * stat.f_frsize,
        }
        return [api.response(API_KEY, version, {"throttle_time_ms": 0, "error_code": 0,
                                                "results": [result]})]
