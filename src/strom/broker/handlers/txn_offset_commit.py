"""TxnOffsetCommit (28), v0-4: offsets committed inside a producer's transaction.

Sent to the group's coordinator after AddOffsetsToTxn. The offsets are written to the group's
``__consumer_offsets`` partition in a transactional batch of the producer and become visible
to OffsetFetch only when the transaction's commit marker reaches that partition (an abort
drops them). v3+ carry the member id, group instance id and generation, checked as Kafka
does (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION). Partitions of unknown
topics get UNKNOWN_TOPIC_OR_PARTITION. Before v2, COORDINATOR_LOAD_IN_PROGRESS is answered
as COORDINATOR_NOT_AVAILABLE (older producers did not retry it).

KIP-890 part 1 (:mod:`.txn_verification`), before the group checks, as Kafka 4.4's group
coordinator: unless the producer's transaction already wrote to the group's partition, its
transaction coordinator must confirm that partition is in the ongoing transaction (added by
AddOffsetsToTxn) at this producer epoch, and the write carries the guard taken before the
question went out, so it fails (INVALID_TXN_STATE) if the transaction ended meanwhile. A
TxnOffsetCommit arriving after its transaction was aborted is thus refused instead of
staying pending, to be committed with the producer's next transaction or to hang the
group's offsets. Refusals as Kafka 4.4 answers them (measured; raw requests, one KRaft node):
a transactional id or producer id the coordinator does not know INVALID_PRODUCER_ID_MAPPING,
an older epoch INVALID_PRODUCER_EPOCH, the group's partition not in the transaction
INVALID_TXN_STATE (v0-3) / TRANSACTION_ABORTABLE (v4), a coordinator that cannot answer now
its retriable error (:func:`.txn_verification.txn_offset_commit_error`). A group partition
not led here is NOT_COORDINATOR before anything is asked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from strom.broker.dispatch import HandlerResult, Request, ResponseParts
from strom.broker.handlers import txn_verification
from strom.broker.handlers.group_common import (
    commit_response_topics,
    offsets_to_commit,
    request_topics,
    respond_when_ready,
)
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.common.types import TopicPartition
from strom.coordinator.group.records import OFFSETS_TOPIC
from strom.coordinator.runtime import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    NOT_COORDINATOR,
)
from strom.protocol import api
from strom.protocol.versions import ApiKey
from strom.replication.replica_manager import VerificationGuard

API_KEY = ApiKey.TXN_OFFSET_COMMIT


class TxnOffsetCommitHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> HandlerResult:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        state = self._state
        image = state.store.image
        access = state.access
        # WRITE on the transactional id, READ on the group: else every partition refused.
        denied = (access.check(request, ResourceType.TRANSACTIONAL_ID, body.transactional_id)
                  or access.check(request, ResourceType.GROUP, body.group_id))
        topics = request_topics(image, body.topics, by_id=False)
        wanted, errors = offsets_to_commit(
            image, topics, with_leader_epoch=version >= 2,
            refused=lambda topic: denied or access.check(request, ResourceType.TOPIC, topic))

        def encode(results: list[int]) -> bytes:
            for o, error in zip(wanted, results, strict=True):
                if version < 2 and error == COORDINATOR_LOAD_IN_PROGRESS:
                    error = COORDINATOR_NOT_AVAILABLE
                errors[(o.topic, o.partition)] = error
            return api.response(API_KEY, version, {
                "throttle_time_ms": 0, "topics": commit_response_topics(topics, errors)})

        def every(code: int) -> list[int]:
            return [code] * len(wanted)

        if not wanted or denied:
            return [encode([])]
        producer_id, epoch = int(body.producer_id), int(body.producer_epoch)

        def commit(guard: VerificationGuard | None) -> HandlerResult:
            return respond_when_ready(
                lambda callback: state.groups.txn_commit_offsets(
                    group_id=body.group_id, producer_id=producer_id, producer_epoch=epoch,
                    generation=int(body.generation_id) if version >= 3 else -1,
                    member_id=(body.member_id or "") if version >= 3 else "",
                    group_instance_id=body.group_instance_id if version >= 3 else None,
                    offsets=wanted, callback=callback, verification_guard=guard),
                encode)

        if not body.group_id:
            return commit(None)  # INVALID_GROUP_ID, from the coordinator
        tp = TopicPartition(OFFSETS_TOPIC, state.groups.partition_for(body.group_id))
        partition = state.replicas.partition(tp)
        if partition is None or not partition.is_leader:
            return [encode(every(NOT_COORDINATOR))]
        verification = txn_verification.start(state, body.transactional_id, producer_id,
                                               epoch, [tp])

        def verified() -> HandlerResult:
            code = txn_verification.txn_offset_commit_error(
                verification.answers.get(tp, 0), version)
            if code:
                return [encode(every(code))]
            return commit(verification.guards.get(tp))

        if verification.remote:
            return _after(txn_verification.finish(state, verification), verified)
        return verified()


async def _after(asking: Awaitable[None], then: Callable[[], HandlerResult]
                 ) -> ResponseParts | None:
    await asking
    result = then()
    if result is None or isinstance(result, list):
        return result
    return await result
