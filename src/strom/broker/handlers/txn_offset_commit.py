"""TxnOffsetCommit (28), v0-4: offsets committed inside a producer's transaction.

Sent to the group's coordinator after AddOffsetsToTxn. The offsets are written to the group's
``__consumer_offsets`` partition in a transactional batch of the producer and become visible
to OffsetFetch only when the transaction's commit marker reaches that partition (an abort
drops them). v3+ carry the member id, group instance id and generation, checked as Kafka
does (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION). Partitions of unknown
topics get UNKNOWN_TOPIC_OR_PARTITION. Before v2, COORDINATOR_LOAD_IN_PROGRESS is answered
as COORDINATOR_NOT_AVAILABLE (older producers did not retry it).
"""

from __future__ import annotations

from strom.broker.dispatch import HandlerResult, Request
from strom.broker.handlers.group_common import (
    commit_response_topics,
    offsets_to_commit,
    respond_when_ready,
)
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.coordinator.runtime import COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE
from strom.protocol import api
from strom.protocol.versions import ApiKey

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
        wanted, errors = offsets_to_commit(
            image, body, with_leader_epoch=version >= 2,
            refused=lambda topic: denied or access.check(request, ResourceType.TOPIC, topic))

        def encode(results: list[int]) -> bytes:
            for o, error in zip(wanted, results, strict=True):
                if version < 2 and error == COORDINATOR_LOAD_IN_PROGRESS:
                    error = COORDINATOR_NOT_AVAILABLE
                errors[(o.topic, o.partition)] = error
            return api.response(API_KEY, version, {
                "throttle_time_ms": 0, "topics": commit_response_topics(body, errors)})

        if not wanted or denied:
            return [encode([])]
        return respond_when_ready(
            lambda callback: state.groups.txn_commit_offsets(
                group_id=body.group_id, producer_id=int(body.producer_id),
                producer_epoch=int(body.producer_epoch),
                generation=int(body.generation_id) if version >= 3 else -1,
                member_id=(body.member_id or "") if version >= 3 else "",
                group_instance_id=body.group_instance_id if version >= 3 else None,
                offsets=wanted, callback=callback),
            encode)
