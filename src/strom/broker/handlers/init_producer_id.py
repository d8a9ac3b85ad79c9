"""InitProducerId (22), v0-5: producer ids for idempotent and transactional producers.

Without a transactional id every call gets a fresh producer id at epoch 0 (Kafka's rule for
idempotent producers). With one, the transaction coordinator answers (see
:mod:`strom.coordinator.txn.shard`): allocation, epoch bump and fencing of the previous
incarnation, aborting what it left open (the caller gets CONCURRENT_TRANSACTIONS and
retries), ``transaction.timeout.ms`` checked against ``transaction.max.timeout.ms``
(INVALID_TRANSACTION_TIMEOUT). v3+ may pass the producer's current (id, epoch) to bump it
without being fenced (KIP-360); one of them -1 and not the other is INVALID_REQUEST. Before
v4 PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH (older clients do not know it).
The first transactional request creates ``__transaction_state``. When no producer-id block
can be reserved or the topic cannot be created (a full disk) the answer is
COORDINATOR_LOAD_IN_PROGRESS, and the client retries.
"""

from __future__ import annotations

from strom.broker.access import CLUSTER_DENIED, TXN_ID_DENIED
from strom.broker.dispatch import HandlerResult, Request
from strom.broker.handlers.common import storage_failure_answer
from strom.broker.handlers.group_common import respond_when_ready
from strom.broker.state import BrokerState
from strom.common.acl import AclOperation, ResourceType
from strom.common.errors import KafkaStorageError, error_class
from strom.coordinator.txn.shard import PRODUCER_FENCED
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.INIT_PRODUCER_ID
INVALID_PRODUCER_EPOCH = error_class("INVALID_PRODUCER_EPOCH").code
INVALID_REQUEST = error_class("INVALID_REQUEST").code


def fenced_for(version: int, first_fenced_version: int, error: int) -> int:
    """PRODUCER_FENCED, as clients older than ``first_fenced_version`` expect it."""
    if error == PRODUCER_FENCED and version < first_fenced_version:
        return INVALID_PRODUCER_EPOCH
    return error


class InitProducerIdHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> HandlerResult:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)

        def answer(result: tuple[int, int, int]) -> bytes:
            error, producer_id, epoch = result
            return api.response(API_KEY, version, {
                "throttle_time_ms": 0, "error_code": fenced_for(version, 4, error),
                "producer_id": producer_id, "producer_epoch": epoch})

        tid = body.transactional_id
        access = self._state.access
        if tid is not None and not access.allowed(request, ResourceType.TRANSACTIONAL_ID, tid):
            return [answer((TXN_ID_DENIED, -1, -1))]
        if tid is None and not (  # KIP-679: WRITE on any topic allows idempotence too
                access.allowed(request, ResourceType.CLUSTER)
                or access.any_allowed(request, ResourceType.TOPIC, AclOperation.WRITE)):
            return [answer((CLUSTER_DENIED, -1, -1))]
        try:
            if tid is None:
                return [answer((0, self._state.producer_ids.next_id(), 0))]
            pid = int(body.producer_id) if version >= 3 else -1
            epoch = int(body.producer_epoch) if version >= 3 else -1
            if (pid == -1) != (epoch == -1):
                return [answer((INVALID_REQUEST, -1, -1))]
            expected = None if pid == -1 else (pid, epoch)
            self._state.ensure_txn_topic()
        except KafkaStorageError as exc:
            return [answer((storage_failure_answer(API_KEY, exc).code, -1, -1))]
        return respond_when_ready(
            lambda callback: self._state.txns.init_producer_id(
                tid, int(body.transaction_timeout_ms), expected,
                lambda error, producer_id, producer_epoch: callback(
                    (error, producer_id, producer_epoch))),
            answer)
