"""Produce (0), v3-11: append record batches; acks 0 / 1 / -1; group-committed durability.

Record bytes arrive as memoryview slices of the request frame and are validated and appended
without decoding records (DESIGN.md). With a single in-sync replica, acks=-1 is satisfied once
the local append (and, where ``flush.messages`` asks for it, the fsync) is done. With acks=0
no response is sent; if an append failed, the connection is closed so the client notices, as
Kafka does.
"""

from __future__ import annotations

import asyncio
import logging

from strom.broker.dispatch import CloseConnection, HandlerResult, Request, ResponseParts
from strom.broker.handlers.common import as_kafka_error, topic_name_for
from strom.broker.state import BrokerState
from strom.common.errors import (
    CorruptMessageError,
    InvalidRequiredAcksError,
    InvalidTopicError,
    InvalidTxnStateError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from strom.protocol import fast
from strom.protocol.versions import ApiKey
from strom.storage.log import Log

API_KEY = ApiKey.PRODUCE
log = logging.getLogger("strom.broker.produce")


class ProduceHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> HandlerResult:
        version = request.version
        req = fast.decode_produce_request(request.body, version)
        state = self._state
        image = state.store.image
        replicas = state.replicas
        acks_valid = req.acks in (-1, 0, 1)
        failed = False
        to_flush: list[tuple[Log, int, fast.ProducePartitionResult]] = []
        results: list[fast.ProduceTopicResult] = []
        for topic in req.topics:
            name = topic_name_for(image, topic.name, topic.topic_id)
            partitions: list[fast.ProducePartitionResult] = []
            for p in topic.partitions:
                result = fast.ProducePartitionResult(p.index)
                partitions.append(result)
                partition = replicas.get(name, p.index) if name is not None else None
                if not acks_valid:
                    result.error_code = InvalidRequiredAcksError.code
                elif req.transactional_id is not None:
                    result.error_code = InvalidTxnStateError.code
                    result.error_message = "transactions are not supported by this broker yet"
                elif partition is None:
                    error = UnknownTopicIdError if name is None else UnknownTopicOrPartitionError
                    result.error_code = error.code
                elif p.records is None:
                    result.error_code = CorruptMessageError.code
                elif image.topics[name].internal:  # type: ignore[index]
                    result.error_code = InvalidTopicError.code
                    result.error_message = f"Cannot append to internal topic {name}"
                else:
                    try:
                        appended = partition.append_as_leader(p.records)
                    except Exception as exc:
                        err = as_kafka_error(exc)
                        result.error_code = err.code
                        result.error_message = err.message
                        log.debug("produce to %s-%d rejected: %s", name, p.index, err)
                    else:
                        result.base_offset = appended.base_offset
                        result.log_append_time_ms = appended.log_append_time
                        result.log_start_offset = appended.log_start_offset
                        if partition.log.needs_flush():
                            to_flush.append((partition.log, appended.last_offset + 1, result))
                        continue
                failed = True
            results.append(fast.ProduceTopicResult(topic.name or "", topic.topic_id, partitions))
        flusher = self._state.flusher
        flushes = [(flusher.schedule(plog, offset), result) for plog, offset, result in to_flush]
        if req.acks == 0:
            if failed:
                raise CloseConnection("acks=0 produce failed; closing so the client notices")
            return None
        if flushes:
            return self._after_flush(flushes, version, results)
        return [fast.encode_produce_response(version, results)]

    async def _after_flush(
        self,
        flushes: list[tuple[asyncio.Future[None], fast.ProducePartitionResult]],
        version: int,
        results: list[fast.ProduceTopicResult],
    ) -> ResponseParts:
        """Answer once every flush is done; a failed fsync fails only its partitions."""
        for future, result in flushes:
            try:
                await future
            except Exception as exc:
                err = as_kafka_error(exc)
                result.error_code = err.code
                result.error_message = err.message
                result.base_offset = -1
        return [fast.encode_produce_response(version, results)]
