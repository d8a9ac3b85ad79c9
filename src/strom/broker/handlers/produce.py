"""Produce (0), v3-11: append record batches through the replica manager's one write path.

Record bytes arrive as memoryview slices of the request frame and are appended without
copying; before that, the request-level checks of :mod:`.produce_checks` (one v2 batch per
partition, zstd from v7, a transactional id for transactional batches) and, in the log,
:mod:`strom.storage.log_validator` (the records inside each batch) run, so a refused
partition gets Kafka's error and nothing is appended (records refused one by one are listed
in ``record_errors``, v8+). Acknowledgement follows ``acks``: 0 — no response (if an
append failed, the connection is closed so the client notices, as Kafka does); 1 — after the
leader's append (and its fsync where ``flush.messages`` asks for it); -1 — once the high
watermark passes the records (the ISR has them), refused up front with NOT_ENOUGH_REPLICAS
when the ISR is smaller than ``min.insync.replicas``. ``timeout_ms`` bounds the wait
(REQUEST_TIMED_OUT).

Transactional writes (KIP-890 part 1, :mod:`.txn_verification`): a producer's first
transactional batch in a partition is appended only if the transaction coordinator confirms
the partition was added to the producer's ongoing transaction, and only if that transaction
has not ended since the question was asked (the append carries the partition's verification
guard; a marker meanwhile makes the log refuse it with INVALID_TXN_STATE). When the
coordinator is another broker, the question goes to it over the wire (AddPartitionsToTxn v4
``verify_only``, through :mod:`strom.coordinator.txn.verifier`) before the append. A refusal
is answered as Kafka 4.4
answers it (:func:`.produce_checks.verification_error`): a producer the coordinator does not
know INVALID_PRODUCER_ID_MAPPING, an old epoch INVALID_PRODUCER_EPOCH, a partition not in the
transaction INVALID_TXN_STATE (TRANSACTION_ABORTABLE from v11) — so producers fail fast —,
and only a coordinator that cannot answer now the retriable NOT_ENOUGH_REPLICAS. The
transactional batches of one request must belong to one producer id and epoch
(INVALID_PRODUCER_ID_MAPPING for every partition otherwise).

Authorization (:mod:`strom.broker.access`): WRITE on each topic (TOPIC_AUTHORIZATION_FAILED
for the topic's partitions, existing or not); transactional batches also need WRITE on the
transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition).

A partition this broker does not lead is answered NOT_LEADER_OR_FOLLOWER (also when it does
not host a partition the metadata has, as Kafka), from v10 with the current-leader hint and
the leader's endpoint (:mod:`.leader_hints`, KIP-951).
"""

from __future__ import annotations

import inspect

from strom.broker.access import TopicDenied
from strom.broker.dispatch import (
    CloseConnection,
    Dispatched,
    HandlerResult,
    Request,
    ResponseParts,
)
from strom.broker.handlers import leader_hints, produce_checks, txn_verification
from strom.broker.handlers.common import topic_name_for
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.errors import (
    KafkaError,
    NotLeaderOrFollowerError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    error_class,
)
from strom.common.types import TopicPartition
from strom.protocol import fast
from strom.protocol.versions import ApiKey
from strom.replication.replica_manager import AppendOrigin, AppendOutcome

API_KEY = ApiKey.PRODUCE
TOPIC, TXN_ID = ResourceType.TOPIC, ResourceType.TRANSACTIONAL_ID
Slots = list[tuple[fast.ProducePartitionResult, TopicPartition | None]]


class ProduceHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> HandlerResult:
        version = request.version
        req = fast.decode_produce_request(request.body, version)
        image = self._state.store.image
        entries: dict[TopicPartition, memoryview | None] = {}
        slots: Slots = []
        results: list[fast.ProduceTopicResult] = []
        transactional = any(produce_checks.has_transactional_batch(p.records)
                            for topic in req.topics for p in topic.partitions)
        producers = _producers(req) if transactional else set()
        request_error = (produce_checks.transactional_id_error(req.transactional_id)
                         or produce_checks.producers_error(producers)
                         if transactional else None)
        access = self._state.access
        if (request_error is None and transactional and req.transactional_id is not None
                and not access.allowed(request, TXN_ID, req.transactional_id)):
            request_error = error_class("TRANSACTIONAL_ID_AUTHORIZATION_FAILED")()
        for topic in req.topics:
            name = topic_name_for(image, topic.name, topic.topic_id)
            denied = name is not None and not access.allowed(request, TOPIC, name)
            partitions: list[fast.ProducePartitionResult] = []
            for p in topic.partitions:
                result = fast.ProducePartitionResult(p.index)
                partitions.append(result)
                error = request_error or (
                    TopicDenied() if denied
                    else UnknownTopicIdError() if name is None
                    else _records_error(version, p.records))
                if error is not None or name is None:
                    _refuse(result, error or UnknownTopicIdError())
                    slots.append((result, None))
                    continue
                tp = TopicPartition(name, p.index)
                entries[tp] = p.records
                slots.append((result, tp))
            results.append(fast.ProduceTopicResult(topic.name or "", topic.topic_id, partitions))
        verification = None
        if request_error is None and producers and req.transactional_id is not None:
            (producer_id, epoch), = producers
            verification = txn_verification.start(
                self._state, req.transactional_id, producer_id, epoch,
                [tp for tp, records in entries.items()
                 if produce_checks.transactional_producer(records) is not None])
            if verification.remote:
                return self._verify_remotely(req, verification, entries, slots, version,
                                             results, request.throttle_ms,
                                             request.conn.listener)
            slots = _refuse_unverified(verification, entries, slots, version)
        return self._append(req, entries, slots, version, results, request.throttle_ms,
                            request.conn.listener, verification)

    def _append(self, req: fast.ProduceRequest, entries: dict[TopicPartition, memoryview | None],
                slots: Slots, version: int, results: list[fast.ProduceTopicResult],
                throttle_ms: int, listener: str | None,
                verification: txn_verification.Verification | None = None) -> HandlerResult:
        outcome = self._state.replicas.append(
            entries, required_acks=req.acks, origin=AppendOrigin.CLIENT,
            timeout_ms=max(req.timeout_ms, 0),
            verification_guards=verification.guards if verification is not None else None)
        if req.acks == 0:
            _fill(slots, outcome)
            if any(result.error_code for result, _ in slots):
                raise CloseConnection("acks=0 produce failed; closing so the client notices")
            return None
        if outcome.done is not None:  # appended: only the acknowledgements are awaited
            return Dispatched(self._when_acknowledged(outcome, slots, version, results,
                                                      throttle_ms, listener))
        _fill(slots, outcome)
        return self._encode(slots, version, results, throttle_ms, listener)

    def _encode(self, slots: Slots, version: int, results: list[fast.ProduceTopicResult],
                throttle_ms: int, listener: str | None) -> ResponseParts:
        """The response, with the leader hints of partitions led elsewhere (see
        :mod:`.leader_hints`)."""
        state = self._state
        for result, tp in slots:
            if tp is None:
                continue
            if (result.error_code == UnknownTopicOrPartitionError.code
                    and leader_hints.in_image(state, tp.topic, tp.partition)):
                result.error_code = NotLeaderOrFollowerError.code
                result.error_message = f"this broker does not host {tp}"
            if (version >= leader_hints.PRODUCE_HINT_VERSION
                    and result.error_code in leader_hints.PRODUCE_HINTED):
                result.current_leader = leader_hints.current_leader(
                    state, tp.topic, tp.partition)
        endpoints = (leader_hints.node_endpoints(state, listener,
                                                 leader_hints.produce_hints(results))
                     if version >= leader_hints.PRODUCE_HINT_VERSION else None)
        return [fast.encode_produce_response(version, results, throttle_ms,
                                             node_endpoints=endpoints)]

    async def _verify_remotely(
        self, req: fast.ProduceRequest, verification: txn_verification.Verification,
        entries: dict[TopicPartition, memoryview | None], slots: Slots, version: int,
        results: list[fast.ProduceTopicResult], throttle_ms: int, listener: str | None,
    ) -> ResponseParts | None:
        """KIP-890 verification by a coordinator on another broker, then the append of what
        it confirmed (the others answer its verdict as a producer gets it:
        :func:`.produce_checks.verification_error`). The appends carry the guards taken
        before the question went out: a transaction that ended meanwhile is refused."""
        await txn_verification.finish(self._state, verification)
        slots = _refuse_unverified(verification, entries, slots, version)
        answer = self._append(req, entries, slots, version, results, throttle_ms, listener,
                              verification)
        return await answer if inspect.isawaitable(answer) else answer

    async def _when_acknowledged(
        self, outcome: AppendOutcome, slots: Slots, version: int,
        results: list[fast.ProduceTopicResult], throttle_ms: int, listener: str | None,
    ) -> ResponseParts:
        assert outcome.done is not None
        await outcome.done
        _fill(slots, outcome)
        return self._encode(slots, version, results, throttle_ms, listener)


def _refuse_unverified(verification: txn_verification.Verification,
                       entries: dict[TopicPartition, memoryview | None], slots: Slots,
                       version: int) -> Slots:
    """Answer each partition the coordinator did not vouch for with its verdict as a
    producer gets it, and leave it out of the append."""
    refused = verification.refused()
    if not refused:
        return slots
    out: Slots = []
    for result, tp in slots:
        code = refused.get(tp) if tp is not None else None
        if code is None:
            out.append((result, tp))
            continue
        error = produce_checks.verification_error(code, version)
        assert error is not None
        _refuse(result, error)
        entries.pop(tp, None)  # type: ignore[arg-type]
        out.append((result, None))
    return out


def _producers(req: fast.ProduceRequest) -> set[tuple[int, int]]:
    """(producer id, epoch) of every partition's transactional batch."""
    return {producer for topic in req.topics for p in topic.partitions
            if (producer := produce_checks.transactional_producer(p.records)) is not None}


def _records_error(version: int, records: memoryview | None) -> KafkaError | None:
    """Kafka's request-level refusal of one partition's records, if any."""
    if records is None:
        return None  # the replica manager answers CORRUPT_MESSAGE
    return produce_checks.records_error(version, records)


def _refuse(result: fast.ProducePartitionResult, error: KafkaError) -> None:
    result.error_code = error.code
    result.error_message = error.message
    result.record_errors = list(error.record_errors)
    result.base_offset = -1


def _fill(slots: list[tuple[fast.ProducePartitionResult, TopicPartition | None]],
          outcome: AppendOutcome) -> None:
    for result, tp in slots:
        if tp is None:
            continue
        appended = outcome.results[tp]
        if appended.error is not None:
            _refuse(result, appended.error)
        else:
            result.base_offset = appended.base_offset
            result.log_append_time_ms = appended.log_append_time
            result.log_start_offset = appended.log_start_offset
