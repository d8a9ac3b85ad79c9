"""``Fetcher``: read assigned partitions from their leaders, without consumer groups.

Assign partitions, position each one (:meth:`Fetcher.seek`, ``seek_to_beginning`` / ``_end`` /
``_timestamp``, or the ``auto_offset_reset`` policy on first fetch), then call
:meth:`Fetcher.fetch` (one round of Fetch requests, one per leader, concurrently) or iterate
``async for record in fetcher``. Positions only move forward past records handed out.
Paused partitions (:meth:`Fetcher.pause`) stay assigned and positioned but are not fetched.

Each leader gets an incremental fetch session (KIP-227, :mod:`strom.client.fetch_session`):
after the first full request, a request names only partitions whose position changed, so an
idle consumer of many partitions sends small requests. A broker that keeps no sessions
answers session id 0 and every request stays full.

Record batches are decoded with :func:`strom.protocol.records.reader.scan_batches` and
``decode_record_tuples`` (straight into :class:`ConsumerRecord`, in C when the optional
extension is built), which decompress and stop at a partial trailing batch (the broker cuts
responses at ``max_partition_bytes``); the next fetch starts at the first offset not yet
returned. Batches that begin before the position (a fetch returns whole batches) have their
earlier records skipped; control batches (transaction markers) never reach the application. With
``isolation_level="read_committed"`` (or 1) fetches stop at the last stable offset and the
records of aborted transactions are dropped by Kafka's rule
(:mod:`strom.client.read_committed`).

Follower fetching (KIP-392): ``client_rack`` is sent as the Fetch ``rack_id``; a partition
whose leader answers with a ``preferred_read_replica`` is read from that broker for
:data:`PREFERRED_REPLICA_LEASE_S` (then the leader is asked again), and goes back to its
leader at once when that broker fails or answers the partition with an error (an offset out
of range there is not taken as definitive and resets nothing, as Kafka's consumers do).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from strom.client.admin_types import OffsetSpec
from strom.client.cluster import DEFAULT_BOOTSTRAP, Cluster
from strom.client.conn import DEFAULT_REQUEST_TIMEOUT_S, Connection
from strom.client.fetch_session import FetchSession, PartitionFetch
from strom.client.offsets import READ_COMMITTED, READ_UNCOMMITTED, list_offsets
from strom.client.read_committed import AbortedTransactions, aborted_of
from strom.client.records import ClientConfigError, ConsumerRecord, consumer_record_layout
from strom.client.security import ClientSecurity
from strom.common.errors import (
    KafkaError,
    NetworkError,
    OffsetOutOfRangeError,
    StromError,
    UnknownTopicOrPartitionError,
    error_class,
    error_for,
)
from strom.common.types import TopicPartition
from strom.protocol.records.reader import decode_record_tuples, scan_batches
from strom.protocol.versions import ApiKey

log = logging.getLogger("strom.client.fetcher")

RESET_POLICIES = ("earliest", "latest", "none")

#: Top-level Fetch errors that end the fetch session (the next request is a full one).
#: How long a partition is read from the preferred replica its leader named before the
#: leader is asked again (librdkafka's lease; the Java consumer's metadata.max.age.ms).
PREFERRED_REPLICA_LEASE_S = 300.0

SESSION_ERRORS = frozenset({error_class("FETCH_SESSION_ID_NOT_FOUND").code,
                            error_class("INVALID_FETCH_SESSION_EPOCH").code})


#: Receives one Fetch answer's decoded records per partition (see :meth:`Fetcher.fetch_from`).
RecordSink = Callable[[dict[TopicPartition, list[ConsumerRecord]]], None]


class NoOffsetError(StromError):
    """A partition has no position and ``auto_offset_reset`` is ``"none"``."""


@dataclass(slots=True)
class PartitionState:
    """What the fetcher knows about one assigned partition."""

    position: int | None = None
    high_watermark: int = -1
    log_start_offset: int = -1
    last_stable_offset: int = -1
    max_bytes: int = 0
    read_from: int = -1  # the preferred read replica the leader named (-1: the leader)
    read_from_until: float = 0.0  # time.monotonic() when that lease ends


class Fetcher:
    """A group-less consumer of explicitly assigned partitions.

    Lifecycle: ``await start()`` (or ``async with``), ``assign`` / ``seek*``, ``fetch`` or
    ``async for``, ``await close()``. Runs on the loop that started it.
    """

    def __init__(
        self,
        bootstrap: str = DEFAULT_BOOTSTRAP,
        *,
        client_id: str = "strom-fetcher",
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        max_bytes: int = 52428800,
        max_partition_bytes: int = 1048576,
        isolation_level: int | str = READ_UNCOMMITTED,
        auto_offset_reset: str = "latest",
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        security: ClientSecurity | None = None,
        client_rack: str = "",
    ) -> None:
        if auto_offset_reset not in RESET_POLICIES:
            raise ClientConfigError(
                f"auto_offset_reset must be one of {', '.join(RESET_POLICIES)}, "
                f"got {auto_offset_reset!r}"
            )
        isolation_level = _isolation(isolation_level)
        self.cluster = Cluster(bootstrap, client_id=client_id,
                               request_timeout_s=request_timeout_s, security=security)
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.max_partition_bytes = max_partition_bytes
        self.isolation_level = isolation_level
        self.auto_offset_reset = auto_offset_reset
        self.request_timeout_s = request_timeout_s
        self.client_rack = client_rack
        self._state: dict[TopicPartition, PartitionState] = {}
        self._paused: set[TopicPartition] = set()
        self._sessions: dict[int, FetchSession] = {}

    async def start(self) -> Fetcher:
        await self.cluster.start()
        return self

    async def close(self) -> None:
        await self.cluster.close()

    async def __aenter__(self) -> Fetcher:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- assignment and positions ------------------------------------------------------------
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Replace the assignment; partitions kept from before keep their positions."""
        wanted = [TopicPartition(*tp) for tp in partitions]
        self._state = {tp: self._state.get(tp) or PartitionState() for tp in wanted}
        self._paused &= set(self._state)

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop fetching ``partitions`` (they keep their positions) until resumed."""
        for tp in partitions:
            self._state_of(tp)
            self._paused.add(TopicPartition(*tp))

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self._paused.discard(TopicPartition(*tp))

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    async def assign_topic(
        self, topic: str, partitions: Iterable[int] | None = None
    ) -> list[TopicPartition]:
        """Assign ``partitions`` of ``topic`` (all of them when None); returns the assignment."""
        count = await self.cluster.topic_partitions(topic)
        chosen = range(count) if partitions is None else list(partitions)
        for p in chosen:
            if not 0 <= p < count:
                raise UnknownTopicOrPartitionError(
                    f"partition {p} of topic {topic!r} does not exist (it has {count})"
                )
        tps = [TopicPartition(topic, p) for p in chosen]
        self.assign([*self._state, *tps])
        return tps

    def assignment(self) -> list[TopicPartition]:
        return list(self._state)

    def position(self, tp: TopicPartition) -> int | None:
        """The next offset to return for ``tp`` (None until positioned)."""
        return self._state[tp].position

    def high_watermark(self, tp: TopicPartition) -> int:
        """The high watermark seen in the last fetch of ``tp`` (-1 before any)."""
        return self._state[tp].high_watermark

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._state_of(tp).position = offset

    async def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        await self._seek_spec(partitions, OffsetSpec.EARLIEST)

    async def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        await self._seek_spec(partitions, OffsetSpec.LATEST)

    async def seek_to_timestamp(
        self, timestamp_ms: int, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, int]:
        """Position at the first record with timestamp ≥ ``timestamp_ms`` (the end if none)."""
        tps = self._targets(partitions)
        found = await list_offsets(self.cluster, dict.fromkeys(tps, timestamp_ms),
                                   isolation_level=self.isolation_level)
        missing = [tp for tp, o in found.items() if o.offset < 0]
        ends = await list_offsets(self.cluster, dict.fromkeys(missing, OffsetSpec.LATEST),
                                  isolation_level=self.isolation_level) if missing else {}
        positions: dict[TopicPartition, int] = {}
        for tp in tps:
            offset = found[tp].offset if found[tp].offset >= 0 else ends[tp].offset
            self._state_of(tp).position = offset
            positions[tp] = offset
        return positions

    async def _seek_spec(self, partitions: Iterable[TopicPartition] | None, spec: int) -> None:
        tps = self._targets(partitions)
        found = await list_offsets(self.cluster, dict.fromkeys(tps, spec),
                                   isolation_level=self.isolation_level)
        for tp, answer in found.items():
            self._state_of(tp).position = answer.offset

    def _targets(self, partitions: Iterable[TopicPartition] | None) -> list[TopicPartition]:
        return list(self._state) if partitions is None else [TopicPartition(*p) for p in partitions]

    def _state_of(self, tp: TopicPartition) -> PartitionState:
        tp = TopicPartition(*tp)
        state = self._state.get(tp)
        if state is None:
            raise ClientConfigError(f"partition {tp} is not assigned")
        return state

    async def _reset_missing(self) -> None:
        missing = [tp for tp, s in self._state.items() if s.position is None]
        if not missing:
            return
        if self.auto_offset_reset == "none":
            raise NoOffsetError(f"no position for {', '.join(map(str, missing))}")
        spec = OffsetSpec.EARLIEST if self.auto_offset_reset == "earliest" else OffsetSpec.LATEST
        await self._seek_spec(missing, spec)

    async def end_offsets(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, int]:
        """Current end offsets (high watermark, or last stable offset when read committed)."""
        tps = self._targets(partitions)
        found = await list_offsets(self.cluster, dict.fromkeys(tps, OffsetSpec.LATEST),
                                   isolation_level=self.isolation_level)
        return {tp: o.offset for tp, o in found.items()}

    # -- fetching ----------------------------------------------------------------------------
    async def fetch(self, max_wait_ms: int | None = None) -> list[ConsumerRecord]:
        """One round of Fetch requests to every leader; the records past each position.

        Returns an empty list when nothing arrived within ``max_wait_ms`` (the fetcher's
        own unless given).
        """
        by_partition = await self.fetch_partitions(max_wait_ms)
        return [record for records in by_partition.values() for record in records]

    async def fetch_partitions(self, max_wait_ms: int | None = None
                               ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """:meth:`fetch`, the records of each partition apart (partitions with none left
        out)."""
        if not self._state:
            raise ClientConfigError("no partitions assigned")
        await self._reset_missing()
        groups = await self.leaders(tp for tp in self._state if tp not in self._paused)
        for node, session in self._sessions.items():
            if node not in groups and session.holds_partitions:
                groups[node] = []  # forget the partitions this leader no longer serves
        wait = self.max_wait_ms if max_wait_ms is None else max_wait_ms
        if not groups:
            await asyncio.sleep(wait / 1000)
            return {}
        results = await asyncio.gather(
            *(self._fetch_from(node, tps, wait) for node, tps in groups.items())
        )
        return {tp: records for chunk in results for tp, records in chunk.items()}

    async def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        while True:
            for record in await self.fetch():
                yield record

    async def leaders(self, partitions: Iterable[TopicPartition]
                      ) -> dict[int, list[TopicPartition]]:
        """``partitions`` grouped by the node id to read them from: their leader (metadata
        refreshed for unknown leaders), or the preferred read replica it named."""
        groups: dict[int, list[TopicPartition]] = defaultdict(list)
        now = time.monotonic()
        for tp in partitions:
            state = self._state.get(tp)
            if state is not None and state.read_from >= 0 and now < state.read_from_until:
                groups[state.read_from].append(tp)
            else:
                groups[await self.cluster.leader_for(tp)].append(tp)
        return groups

    async def fetch_from(self, node: int, tps: list[TopicPartition], max_wait_ms: int,
                         sink: RecordSink | None = None
                         ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """One Fetch of ``tps`` from broker ``node``; the records past each position.

        The answer for a partition is dropped (records and error alike) when the partition
        was sought, reset or reassigned while the request was in flight: its position or its
        state is no longer the one the request was built from. ``sink`` gets the decoded
        records before any await, i.e. in the same step as the positions move past them —
        so a caller that buffers records never shows a position beyond its buffer."""
        return await self._fetch_from(node, tps, max_wait_ms, sink)

    async def _fetch_from(self, node: int, tps: list[TopicPartition], max_wait_ms: int,
                          sink: RecordSink | None = None
                          ) -> dict[TopicPartition, list[ConsumerRecord]]:
        session = self._sessions.setdefault(node, FetchSession())
        sent = {tp: (state, state.position) for tp in tps
                if (state := self._state.get(tp)) is not None}
        try:
            conn = await self.cluster.connection(node)
            response = await self._request(conn, session, list(sent), max_wait_ms)
        except (NetworkError, asyncio.CancelledError) as exc:
            session.failed()
            if isinstance(exc, asyncio.CancelledError):
                raise
            log.debug("fetch from broker %d failed: %s", node, exc)
            for tp in tps:
                self.cluster.invalidate(tp)
                if (state := self._state.get(tp)) is not None and state.read_from == node:
                    state.read_from = -1  # back to the leader
            await asyncio.sleep(0.1)
            return {}
        except KafkaError:
            session.failed()
            raise
        code = getattr(response, "error_code", 0)
        session.completed(code, getattr(response, "session_id", 0))
        if code in SESSION_ERRORS:
            log.debug("broker %d dropped our fetch session (%s); starting a new one", node,
                      error_for(code).name)
            return {}
        if code:
            raise error_for(code, f"Fetch from broker {node}")
        records: dict[TopicPartition, list[ConsumerRecord]] = {}
        errors: list[tuple[TopicPartition, KafkaError]] = []
        for topic in response.responses:
            for p in topic.partitions:
                tp = TopicPartition(topic.topic, p.partition_index)
                state, position = sent.get(tp, (None, None))
                if state is None or self._state.get(tp) is not state \
                        or state.position != position:
                    continue  # not asked for, reassigned, or sought since the request
                if p.error_code:
                    if state.read_from == node:  # from a follower: back to the leader
                        state.read_from = -1
                        continue
                    errors.append((tp, error_for(p.error_code, f"fetching {tp}")))
                    continue
                preferred = getattr(p, "preferred_read_replica", -1)
                if preferred is not None and preferred >= 0 and preferred != node:
                    state.read_from = preferred
                    state.read_from_until = time.monotonic() + PREFERRED_REPLICA_LEASE_S
                state.high_watermark = p.high_watermark
                state.log_start_offset = getattr(p, "log_start_offset", -1)
                state.last_stable_offset = getattr(p, "last_stable_offset", -1)
                if p.records:
                    decoded = self._decode(tp, state, p)
                    if decoded:
                        records[tp] = decoded
        if sink is not None:
            sink(records)
        for tp, error in errors:
            await self._handle_error(tp, error)
        return records

    async def _request(self, conn: Connection, session: FetchSession,
                       tps: list[TopicPartition], max_wait_ms: int) -> Any:
        wanted: dict[TopicPartition, PartitionFetch] = {}
        for tp in tps:
            state = self._state[tp]
            position = state.position if state.position is not None else 0
            wanted[tp] = (position, state.max_bytes or self.max_partition_bytes)
        version = conn.version(ApiKey.FETCH)
        plan = session.build(wanted, version)
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for tp, (offset, max_bytes) in plan.partitions.items():
            by_topic[tp.topic].append({
                "partition": tp.partition,
                "fetch_offset": offset,
                "log_start_offset": -1,
                "partition_max_bytes": max_bytes,
            })
        forgotten: dict[str, list[int]] = defaultdict(list)
        for tp in plan.forgotten:
            forgotten[tp.topic].append(tp.partition)
        fields = {
            "replica_id": -1,
            "max_wait_ms": max_wait_ms,
            "min_bytes": self.min_bytes,
            "max_bytes": self.max_bytes,
            "isolation_level": self.isolation_level,
            "session_id": plan.session_id,
            "session_epoch": plan.epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            "forgotten_topics_data": [{"topic": t, "partitions": ps}
                                      for t, ps in forgotten.items()],
            "rack_id": self.client_rack,
        }
        return await conn.request(ApiKey.FETCH, fields, version=version,
                                  timeout_s=self.request_timeout_s + max_wait_ms / 1000)

    async def _handle_error(self, tp: TopicPartition, error: KafkaError) -> None:
        if isinstance(error, OffsetOutOfRangeError) and self.auto_offset_reset != "none":
            log.info("%s: position %s out of range; resetting to %s", tp,
                     self._state[tp].position, self.auto_offset_reset)
            self._state[tp].position = None
            await self._reset_missing()
            return
        if error.retriable:
            self.cluster.invalidate(tp)
            return
        raise error

    def _decode(self, tp: TopicPartition, state: PartitionState, p: Any) -> list[ConsumerRecord]:
        position = state.position if state.position is not None else 0
        aborted = AbortedTransactions(
            aborted_of(p) if self.isolation_level == READ_COMMITTED else ())
        out: list[ConsumerRecord] = []
        advanced = False
        topic, partition = tp
        for header in scan_batches(p.records):
            advanced = True
            next_offset = header.base_offset + header.last_offset_delta + 1
            layout = consumer_record_layout(topic, partition,
                                            1 if header.is_log_append_time else 0,
                                            header.partition_leader_epoch)
            batch_records: list[ConsumerRecord] = decode_record_tuples(p.records, header,
                                                                       layout)
            if aborted.drops(header, batch_records):
                position = max(position, next_offset)
                continue
            if header.base_offset < position:  # a batch the position starts inside of
                batch_records = [r for r in batch_records if r.offset >= position]
            out.extend(batch_records)
            position = max(position, next_offset)
        if not advanced and len(p.records) >= (state.max_bytes or self.max_partition_bytes):
            # Only a partial batch fit: a batch is larger than the fetch size. Grow it.
            state.max_bytes = 2 * (state.max_bytes or self.max_partition_bytes)
            log.info("%s: a batch exceeds the fetch size; raising it to %d", tp, state.max_bytes)
        else:
            state.max_bytes = 0
        state.position = position
        return out


_ISOLATION_NAMES = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}


def _isolation(level: int | str) -> int:
    """``0`` / ``1`` or Kafka's names ``read_uncommitted`` / ``read_committed``."""
    value = _ISOLATION_NAMES.get(level.strip().lower(), -1) if isinstance(level, str) else level
    if value not in (READ_UNCOMMITTED, READ_COMMITTED):
        raise ClientConfigError("isolation_level must be 'read_uncommitted' (0) or "
                                f"'read_committed' (1), got {level!r}")
    return value
