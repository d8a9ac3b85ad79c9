"""An in-process fake broker for client unit tests (no storage, no real broker needed).

It speaks the real wire protocol through :mod:`strom.protocol.api` and keeps each partition's
batches in memory: enough for ApiVersions, Metadata, Create/DeleteTopics, CreatePartitions,
Describe/IncrementalAlterConfigs, Produce, Fetch, ListOffsets and InitProducerId. A hook per
API key may delay a request, return "drop" (close the connection), "ignore" (never answer) or
a dict of response fields to send instead.

Group admin APIs (FindCoordinator, OffsetCommit, OffsetFetch, DescribeGroups, ListGroups,
DeleteGroups, OffsetDelete) answer from :attr:`FakeBroker.groups`, a dict of
:class:`FakeGroup` that tests fill in directly (no JoinGroup / SyncGroup: members are set up
by the test). They are advertised only when the broker is created with
``versions={**SUPPORTED, **GROUP_API_VERSIONS}``, like a real broker before and after it
gained consumer groups.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from strom.protocol import api
from strom.protocol.frame import (
    FrameDecoder,
    encode_response_header,
    parse_request_header,
    size_prefix,
)
from strom.protocol.records.batch import iter_batches, patch_base_offset
from strom.protocol.versions import SUPPORTED, ApiKey, response_header_version

Hook = Callable[[int, int, Any], Awaitable[Any]]

# The group admin APIs with the ranges a Kafka 4 broker serves.
GROUP_API_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.DESCRIBE_GROUPS: (0, 6),
    ApiKey.LIST_GROUPS: (0, 5),
    42: (0, 2),  # DeleteGroups
    47: (0, 0),  # OffsetDelete
}


def without_group_apis(versions: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """``versions`` minus the group APIs (JoinGroup and friends too): a broker without groups."""
    return {k: v for k, v in versions.items() if not 8 <= k <= 16 and k not in (42, 47)}


@dataclass
class FakePartition:
    batches: list[tuple[int, bytes]] = field(default_factory=list)  # (base offset, bytes)
    next_offset: int = 0
    timestamps: list[tuple[int, int]] = field(default_factory=list)  # (offset, max ts)
    sequences: dict[int, int] = field(default_factory=dict)  # producer id -> next sequence


@dataclass
class FakeGroup:
    """A group as the fake coordinator keeps it. ``members`` hold DescribeGroups member fields
    (``member_id``, ``client_id``, ``client_host``, ``member_metadata``,
    ``member_assignment``); ``offsets`` map (topic, partition) to (offset, metadata)."""

    state: str = "Empty"
    protocol_type: str = "consumer"
    protocol: str = ""
    members: list[dict[str, Any]] = field(default_factory=list)
    offsets: dict[tuple[str, int], tuple[int, str | None]] = field(default_factory=dict)
    subscribed: set[str] = field(default_factory=set)


class FakeBroker:
    """Lifecycle: ``await start()``, use ``bootstrap``, ``await stop()``. One node, id 0."""

    def __init__(self, versions: dict[int, tuple[int, int]] | None = None) -> None:
        self.versions = dict(SUPPORTED if versions is None else versions)
        self.topics: dict[str, list[FakePartition]] = {}
        self.requests: list[tuple[int, int, Any]] = []
        self.hooks: dict[int, Hook] = {}
        self.server: asyncio.Server | None = None
        self.port = 0
        self.writers: list[asyncio.StreamWriter] = []
        self.produce_errors: list[int] = []  # error codes to answer to the next Produce calls
        self.next_producer_id = 1000
        self.configs: dict[str, dict[str, str]] = {}
        self.groups: dict[str, FakeGroup] = {}
        self.coordinator_errors: list[int] = []  # answered to the next FindCoordinator keys
        self.leaderless: set[str] = set()  # topics whose partitions have no leader
        #: More brokers for Metadata to list ({"node_id", "host", "port"}): e.g. another
        #: FakeBroker acting as a group coordinator that leads no partition.
        self.other_brokers: list[dict[str, Any]] = []

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> FakeBroker:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        for writer in self.writers:
            writer.close()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def drop_connections(self) -> None:
        for writer in self.writers:
            writer.close()
        self.writers.clear()

    def create(self, name: str, partitions: int = 1) -> None:
        self.topics[name] = [FakePartition() for _ in range(partitions)]

    # -- serving -----------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        decoder = FrameDecoder(100 * 1024 * 1024)
        lock = asyncio.Lock()
        tasks: set[asyncio.Task[None]] = set()
        try:
            while data := await reader.read(65536):
                for frame in decoder.feed(data):
                    task = asyncio.create_task(self._answer(frame, writer, lock))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _answer(self, frame: memoryview, writer: asyncio.StreamWriter,
                      lock: asyncio.Lock) -> None:
        header, offset = parse_request_header(frame)
        key, version = header.api_key, header.api_version
        body = frame[offset:]
        if key == ApiKey.API_VERSIONS and not (
            self.versions[key][0] <= version <= self.versions[key][1]
        ):
            payload = api.response(key, 0, {"error_code": 35, "api_keys": self._api_keys()})
            await self._write(writer, lock, header.correlation_id, 0, payload)
            return
        request = api.decode_request(key, version, body)
        self.requests.append((key, version, request))
        hook = self.hooks.get(key)
        if hook is not None:
            result = await hook(key, version, request)
            if result == "drop":
                writer.close()
                return
            if result == "ignore":
                return
            if isinstance(result, dict):
                payload = api.response(key, version, result)
                await self._write(writer, lock, header.correlation_id,
                                  response_header_version(key, version), payload)
                return
        if key == ApiKey.PRODUCE and request.acks == 0:
            self._produce(request)
            return
        fields = getattr(self, f"_api_{key}")(version, request)
        payload = api.response(key, version, fields)
        await self._write(writer, lock, header.correlation_id,
                          response_header_version(key, version), payload)

    async def _write(self, writer: asyncio.StreamWriter, lock: asyncio.Lock,
                     correlation_id: int, header_version: int, payload: bytes) -> None:
        head = encode_response_header(correlation_id, header_version)
        async with lock:
            writer.write(size_prefix(len(head) + len(payload)) + head + payload)
            with contextlib.suppress(ConnectionError):
                await writer.drain()

    def _api_keys(self) -> list[dict[str, int]]:
        return [{"api_key": k, "min_version": lo, "max_version": hi}
                for k, (lo, hi) in sorted(self.versions.items())]

    # -- APIs --------------------------------------------------------------------------------
    def _api_18(self, version: int, request: Any) -> dict[str, Any]:
        return {"error_code": 0, "api_keys": self._api_keys()}

    def _api_3(self, version: int, request: Any) -> dict[str, Any]:
        names = list(self.topics) if request.topics is None else [t.name for t in request.topics]
        topics: list[dict[str, Any]] = []
        for name in names:
            parts = self.topics.get(name)
            if parts is None:
                topics.append({"error_code": 3, "name": name, "partitions": []})
                continue
            no_leader = name in self.leaderless
            topics.append({"error_code": 0, "name": name, "partitions": [
                {"error_code": 5 if no_leader else 0, "partition_index": i,
                 "leader_id": -1 if no_leader else 0, "leader_epoch": 0,
                 "replica_nodes": [0], "isr_nodes": [0], "offline_replicas": []}
                for i in range(len(parts))
            ]})
        return {"brokers": [{"node_id": 0, "host": "127.0.0.1", "port": self.port},
                            *self.other_brokers],
                "cluster_id": "fake", "controller_id": 0, "topics": topics}

    def _api_19(self, version: int, request: Any) -> dict[str, Any]:
        results = []
        for t in request.topics:
            if t.name in self.topics:
                results.append({"name": t.name, "error_code": 36,
                                "error_message": f"Topic '{t.name}' already exists."})
                continue
            count = t.num_partitions if t.num_partitions > 0 else 1
            if not request.validate_only:
                self.create(t.name, count)
            results.append({"name": t.name, "error_code": 0, "error_message": None,
                            "num_partitions": count, "replication_factor": 1})
        return {"topics": results}

    def _api_20(self, version: int, request: Any) -> dict[str, Any]:
        names = [t.name for t in request.topics] if version >= 6 else request.topic_names
        results = []
        for name in names:
            code = 0 if self.topics.pop(name, None) is not None else 3
            results.append({"name": name, "error_code": code})
        return {"responses": results}

    def _api_37(self, version: int, request: Any) -> dict[str, Any]:
        results = []
        for t in request.topics:
            parts = self.topics.get(t.name)
            if parts is None:
                results.append({"name": t.name, "error_code": 3})
                continue
            if t.count <= len(parts):
                results.append({"name": t.name, "error_code": 37,
                                "error_message": f"Topic already has {len(parts)} partitions."})
                continue
            parts.extend(FakePartition() for _ in range(t.count - len(parts)))
            results.append({"name": t.name, "error_code": 0})
        return {"results": results}

    def _api_32(self, version: int, request: Any) -> dict[str, Any]:
        results = []
        for r in request.resources:
            overrides = self.configs.get(r.resource_name, {})
            configs = [{"name": k, "value": v, "read_only": False, "config_source": 1,
                        "is_sensitive": False,
                        "synonyms": [{"name": k, "value": v, "source": 1}]
                        if request.include_synonyms else []}
                       for k, v in sorted(overrides.items())]
            configs.append({"name": "segment.bytes", "value": "1073741824", "read_only": False,
                            "config_source": 5, "is_sensitive": False, "synonyms": []})
            results.append({"error_code": 0, "error_message": None,
                            "resource_type": r.resource_type, "resource_name": r.resource_name,
                            "configs": configs})
        return {"results": results}

    def _api_44(self, version: int, request: Any) -> dict[str, Any]:
        responses = []
        for r in request.resources:
            overrides = self.configs.setdefault(r.resource_name, {})
            for c in r.configs:
                if c.config_operation == 0:
                    overrides[c.name] = c.value
                elif c.config_operation == 1:
                    overrides.pop(c.name, None)
            responses.append({"error_code": 0, "error_message": None,
                              "resource_type": r.resource_type,
                              "resource_name": r.resource_name})
        return {"responses": responses}

    def _api_46(self, version: int, request: Any) -> dict[str, Any]:
        """ListPartitionReassignments: one broker never moves replicas, nothing is ongoing."""
        return {"error_code": 0, "error_message": None, "topics": []}

    def _api_22(self, version: int, request: Any) -> dict[str, Any]:
        self.next_producer_id += 1
        return {"error_code": 0, "producer_id": self.next_producer_id, "producer_epoch": 0}

    def _produce(self, request: Any) -> list[dict[str, Any]]:
        responses = []
        for t in request.topic_data:
            parts = []
            for p in t.partition_data:
                if self.produce_errors:
                    parts.append({"index": p.index, "error_code": self.produce_errors.pop(0),
                                  "base_offset": -1})
                    continue
                partition = self.topics[t.name][p.index]
                data = bytearray(p.records)
                base = partition.next_offset
                code = self._check_sequences(partition, iter_batches(data))
                if code:
                    parts.append({"index": p.index, "error_code": code, "base_offset": -1})
                    continue
                for header in iter_batches(data):
                    patch_base_offset(data, header.position, partition.next_offset)
                    partition.batches.append(
                        (partition.next_offset, bytes(data[header.position:
                                                           header.position + header.size]))
                    )
                    partition.timestamps.append((partition.next_offset, header.max_timestamp))
                    partition.next_offset += header.last_offset_delta + 1
                parts.append({"index": p.index, "error_code": 0, "base_offset": base})
            responses.append({"name": t.name, "partition_responses": parts})
        return responses

    def _check_sequences(self, partition: FakePartition, headers: list[Any]) -> int:
        """Idempotence as a broker checks it: each producer's next base sequence."""
        for header in headers:
            if header.producer_id < 0:
                continue
            expected = partition.sequences.get(header.producer_id, 0)
            if header.base_sequence != expected:
                return 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
            partition.sequences[header.producer_id] = expected + header.last_offset_delta + 1
        return 0

    def _api_0(self, version: int, request: Any) -> dict[str, Any]:
        return {"responses": self._produce(request)}

    def _api_1(self, version: int, request: Any) -> dict[str, Any]:
        responses = []
        for t in request.topics:
            parts = []
            for p in t.partitions:
                partition = self.topics[t.topic][p.partition]
                if p.fetch_offset > partition.next_offset:
                    parts.append({"partition_index": p.partition, "error_code": 1,
                                  "high_watermark": partition.next_offset, "records": None})
                    continue
                chunks = [b for base, b in partition.batches
                          if base + _count(b) > p.fetch_offset]
                data = b"".join(chunks)[: p.partition_max_bytes]
                parts.append({"partition_index": p.partition, "error_code": 0,
                              "high_watermark": partition.next_offset,
                              "last_stable_offset": partition.next_offset,
                              "log_start_offset": 0, "records": data})
            responses.append({"topic": t.topic, "partitions": parts})
        return {"error_code": 0, "session_id": 0, "responses": responses}

    def _api_2(self, version: int, request: Any) -> dict[str, Any]:
        topics = []
        for t in request.topics:
            parts = []
            for p in t.partitions:
                partition = self.topics[t.name][p.partition_index]
                if p.timestamp == -2:
                    offset = 0
                elif p.timestamp == -1:
                    offset = partition.next_offset
                else:
                    offset = next((o for o, ts in partition.timestamps if ts >= p.timestamp), -1)
                parts.append({"partition_index": p.partition_index, "error_code": 0,
                              "timestamp": -1, "offset": offset})
            topics.append({"name": t.name, "partitions": parts})
        return {"topics": topics}

    # -- groups ------------------------------------------------------------------------------
    def _coordinator(self, key: str) -> dict[str, Any]:
        code = self.coordinator_errors.pop(0) if self.coordinator_errors else 0
        if code:
            return {"key": key, "error_code": code, "error_message": None,
                    "node_id": -1, "host": "", "port": -1}
        return {"key": key, "error_code": 0, "error_message": None,
                "node_id": 0, "host": "127.0.0.1", "port": self.port}

    def _api_10(self, version: int, request: Any) -> dict[str, Any]:
        if version >= 4:
            return {"coordinators": [self._coordinator(k) for k in request.coordinator_keys]}
        answer = self._coordinator(request.key)
        del answer["key"]
        return answer

    def _api_8(self, version: int, request: Any) -> dict[str, Any]:
        group = self.groups.get(request.group_id)
        admin = request.generation_id_or_member_epoch < 0 and not request.member_id
        code = 0
        if group is not None and group.members and admin:
            code = 25  # UNKNOWN_MEMBER_ID: the group is not empty
        topics = []
        for t in request.topics:
            parts = []
            for p in t.partitions:
                if code:
                    parts.append({"partition_index": p.partition_index, "error_code": code})
                    continue
                if t.name not in self.topics:
                    parts.append({"partition_index": p.partition_index, "error_code": 3})
                    continue
                group = self.groups.setdefault(request.group_id, FakeGroup())
                group.offsets[(t.name, p.partition_index)] = (p.committed_offset,
                                                              p.committed_metadata)
                parts.append({"partition_index": p.partition_index, "error_code": 0})
            topics.append({"name": t.name, "partitions": parts})
        return {"topics": topics}

    def _fetch_offsets(self, group_id: str, topics: Any) -> list[dict[str, Any]]:
        group = self.groups.get(group_id, FakeGroup())
        wanted: dict[str, list[int]] = {}
        if topics is None:
            for (topic, partition) in sorted(group.offsets):
                wanted.setdefault(topic, []).append(partition)
        else:
            wanted = {t.name: list(t.partition_indexes) for t in topics}
        out = []
        for topic, partitions in wanted.items():
            parts = []
            for partition in partitions:
                offset, metadata = group.offsets.get((topic, partition), (-1, ""))
                parts.append({"partition_index": partition, "committed_offset": offset,
                              "committed_leader_epoch": -1, "metadata": metadata,
                              "error_code": 0})
            out.append({"name": topic, "partitions": parts})
        return out

    def _api_9(self, version: int, request: Any) -> dict[str, Any]:
        if version >= 8:
            return {"groups": [
                {"group_id": g.group_id, "error_code": 0,
                 "topics": self._fetch_offsets(g.group_id, g.topics)}
                for g in request.groups]}
        return {"error_code": 0, "topics": self._fetch_offsets(request.group_id, request.topics)}

    def _api_15(self, version: int, request: Any) -> dict[str, Any]:
        described = []
        for group_id in request.groups:
            group = self.groups.get(group_id)
            if group is None:
                described.append({
                    "error_code": 69 if version >= 6 else 0,
                    "error_message": f"Group {group_id} not found." if version >= 6 else None,
                    "group_id": group_id, "group_state": "Dead", "protocol_type": "",
                    "protocol_data": "", "members": []})
                continue
            described.append({
                "error_code": 0, "group_id": group_id, "group_state": group.state,
                "protocol_type": group.protocol_type, "protocol_data": group.protocol,
                "members": [dict(m) for m in group.members]})
        return {"groups": described}

    def _api_16(self, version: int, request: Any) -> dict[str, Any]:
        states = set(getattr(request, "states_filter", None) or ()) if version >= 4 else set()
        listed = []
        for group_id, group in sorted(self.groups.items()):
            if states and group.state not in states:
                continue
            entry: dict[str, Any] = {"group_id": group_id, "protocol_type": group.protocol_type}
            if version >= 4:
                entry["group_state"] = group.state
            if version >= 5:
                entry["group_type"] = "classic"
            listed.append(entry)
        return {"error_code": 0, "groups": listed}

    def _api_42(self, version: int, request: Any) -> dict[str, Any]:
        results = []
        for group_id in request.groups_names:
            group = self.groups.get(group_id)
            if group is None:
                code = 69
            elif group.members:
                code = 68
            else:
                code = 0
                del self.groups[group_id]
            results.append({"group_id": group_id, "error_code": code})
        return {"throttle_time_ms": 0, "results": results}

    def _api_47(self, version: int, request: Any) -> dict[str, Any]:
        group = self.groups.get(request.group_id)
        if group is None:
            return {"error_code": 69, "topics": []}
        topics = []
        for t in request.topics:
            parts = []
            for p in t.partitions:
                code = 86 if t.name in group.subscribed else 0
                if not code:
                    group.offsets.pop((t.name, p.partition_index), None)
                parts.append({"partition_index": p.partition_index, "error_code": code})
            topics.append({"name": t.name, "partitions": parts})
        return {"error_code": 0, "topics": topics}


def _count(batch: bytes) -> int:
    return int(struct.unpack_from(">i", batch, 23)[0]) + 1
