"""Produce (0), v3-11: append record batches through the replica manager's one write path.

Record bytes arrive as memoryview slices of the request frame and are validated and appended
without decoding records (DESIGN.md). Acknowledgement follows ``acks``: 0 — no response (if an
append failed, the connection is closed so the client notices, as Kafka does); 1 — after the
leader's append (and its fsync where ``flush.messages`` asks for it); -1 — once the high
watermark passes the records (the ISR has them), refused up front with NOT_ENOUGH_REPLICAS
when the ISR is smaller than ``min.insync.replicas``. ``timeout_ms`` bounds the wait
(REQUEST_TIMED_OUT).
"""

from __future__ import annotations

from strom.broker.dispatch import CloseConnection, HandlerResult, Request, ResponseParts
from strom.broker.handlers.common import topic_name_for
from strom.broker.state import BrokerState
from strom.common.errors import InvalidTxnStateError, UnknownTopicIdError
from strom.common.types import TopicPartition
from strom.protocol import fast
from strom.protocol.versions import ApiKey
from strom.replication.replica_manager import AppendOrigin, AppendOutcome

API_KEY = ApiKey.PRODUCE


class ProduceHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> HandlerResult:
        version = request.version
        req = fast.decode_produce_request(request.body, version)
        image = self._state.store.image
        entries: dict[TopicPartition, memoryview | None] = {}
        slots: list[tuple[fast.ProducePartitionResult, TopicPartition | None]] = []
        results: list[fast.ProduceTopicResult] = []
        for topic in req.topics:
            name = topic_name_for(image, topic.name, topic.topic_id)
            partitions: list[fast.ProducePartitionResult] = []
            for p in topic.partitions:
                result = fast.ProducePartitionResult(p.index)
                partitions.append(result)
                if req.transactional_id is not None and req.acks in (-1, 0, 1):
                    result.error_code = InvalidTxnStateError.code
                    result.error_message = "transactions are not supported by this broker yet"
                    slots.append((result, None))
                elif name is None:
                    result.error_code = UnknownTopicIdError.code
                    slots.append((result, None))
                else:
                    tp = TopicPartition(name, p.index)
                    entries[tp] = p.records
                    slots.append((result, tp))
            results.append(fast.ProduceTopicResult(topic.name or "", topic.topic_id, partitions))
        outcome = self._state.replicas.append(
            entries, required_acks=req.acks, origin=AppendOrigin.CLIENT,
            timeout_ms=max(req.timeout_ms, 0))
        if req.acks == 0:
            _fill(slots, outcome)
            if any(result.error_code for result, _ in slots):
                raise CloseConnection("acks=0 produce failed; closing so the client notices")
            return None
        if outcome.done is not None:
            return self._when_acknowledged(outcome, slots, version, results)
        _fill(slots, outcome)
        return [fast.encode_produce_response(version, results)]

    async def _when_acknowledged(
        self, outcome: AppendOutcome,
        slots: list[tuple[fast.ProducePartitionResult, TopicPartition | None]],
        version: int, results: list[fast.ProduceTopicResult],
    ) -> ResponseParts:
        assert outcome.done is not None
        await outcome.done
        _fill(slots, outcome)
        return [fast.encode_produce_response(version, results)]


def _fill(slots: list[tuple[fast.ProducePartitionResult, TopicPartition | None]],
          outcome: AppendOutcome) -> None:
    for result, tp in slots:
        if tp is None:
            continue
        appended = outcome.results[tp]
        if appended.error is not None:
            result.error_code = appended.error.code
            result.error_message = appended.error.message
            result.base_offset = -1
        else:
            result.base_offset = appended.base_offset
            result.log_append_time_ms = appended.log_append_time
            result.log_start_offset = appended.log_start_offset
