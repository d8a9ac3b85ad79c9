"""KIP-890 part 1 on a partition leader, shared by Produce and TxnOffsetCommit: before a
transactional producer's first write to a partition (a data batch, or offsets in a group's
``__consumer_offsets`` partition), its transaction coordinator must confirm that the partition
is in the producer's ongoing transaction (Kafka's
``ReplicaManager.maybeStartTransactionVerificationForPartitions`` and
``AddPartitionsToTxnManager``).

:func:`start` runs per request, for one producer (id, epoch) and the partitions it writes:

* a partition not led here, or where the producer's transaction is already open (it wrote
  there since its last marker), needs nothing — its append checks the rest;
* for each other partition the leader takes the producer's *verification guard*
  (:meth:`strom.replication.partition.Partition.start_transaction_verification`) **before**
  asking, and the append must carry it: any transactional batch of the producer that reaches
  the log meanwhile — its transaction's abort marker, say — clears the guard, so a "yes" about
  a transaction that ended can never start a new one there (INVALID_TXN_STATE from the log);
* the coordinator on this broker answers at once
  (:meth:`~strom.coordinator.txn.coordinator.TxnCoordinator.verify_partitions`); when it
  leads elsewhere the partitions go to :func:`finish`, which asks it over the wire
  (AddPartitionsToTxn v4 ``verify_only``, :mod:`strom.coordinator.txn.verifier`).

The answers are the coordinator's codes (0 when the partition is in the transaction); each
API turns them into the errors its clients know (Produce:
:func:`.produce_checks.verification_error`; TxnOffsetCommit: :func:`txn_offset_commit_error`).
With ``transaction.partition.verification.enable`` off nothing is verified and no guard is
taken (the log then asks for none). Owned by the broker's event-loop thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from strom.broker.state import BrokerState
from strom.common.errors import error_class, error_for
from strom.common.types import TopicPartition
from strom.coordinator.runtime import coordinator_error
from strom.replication.replica_manager import VerificationGuard

NOT_COORDINATOR = error_class("NOT_COORDINATOR").code
PRODUCER_FENCED = error_class("PRODUCER_FENCED").code
INVALID_PRODUCER_EPOCH = error_class("INVALID_PRODUCER_EPOCH").code
TRANSACTION_ABORTABLE = error_class("TRANSACTION_ABORTABLE").code
INVALID_TXN_STATE = error_class("INVALID_TXN_STATE").code
#: TxnOffsetCommit v4 is the first whose producers know TRANSACTION_ABORTABLE (KIP-890).
ABORTABLE_MIN_TXN_OFFSET_COMMIT_VERSION = 4


@dataclass(slots=True)
class Verification:
    """One request's verification: ``guards`` for the partitions being verified (the
    appends carry them), ``answers`` known so far (the coordinator's code per partition),
    ``remote`` the partitions :func:`finish` must still ask another broker about."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    guards: dict[TopicPartition, VerificationGuard] = field(default_factory=dict)
    answers: dict[TopicPartition, int] = field(default_factory=dict)
    remote: set[TopicPartition] = field(default_factory=set)

    def refused(self) -> dict[TopicPartition, int]:
        """The partitions the coordinator did not vouch for, with its answer."""
        return {tp: code for tp, code in self.answers.items() if code}


def enabled(state: BrokerState) -> bool:
    return bool(state.config.get("transaction.partition.verification.enable"))


def start(state: BrokerState, transactional_id: str, producer_id: int, producer_epoch: int,
          partitions: Iterable[TopicPartition]) -> Verification:
    """Take the guards and ask the local coordinator (see the module docstring)."""
    verification = Verification(transactional_id, producer_id, producer_epoch)
    if not enabled(state):
        return verification
    for tp in partitions:
        partition = state.replicas.partition(tp)
        if partition is None or not partition.is_leader:
            continue  # the append answers it (not hosted / not the leader)
        guard = partition.start_transaction_verification(producer_id)
        if guard is not None:
            verification.guards[tp] = guard
    if not verification.guards:
        return verification
    local = state.txns.verify_partitions(transactional_id, producer_id, producer_epoch,
                                         set(verification.guards))
    for tp, code in local.items():
        if code == NOT_COORDINATOR and state.txn_verifier is not None:
            verification.remote.add(tp)  # the coordinator is another broker: ask it
        else:
            verification.answers[tp] = code
    return verification


async def finish(state: BrokerState, verification: Verification) -> None:
    """Ask the coordinator on another broker about :attr:`Verification.remote`."""
    if not verification.remote:
        return
    verifier = state.txn_verifier
    assert verifier is not None
    answers = await verifier.verify(verification.transactional_id, verification.producer_id,
                                    verification.producer_epoch, verification.remote)
    verification.answers.update(answers)
    verification.remote = set()


def txn_offset_commit_error(code: int, version: int) -> int:
    """The error a TxnOffsetCommit of ``version`` answers for the coordinator's verification
    answer ``code`` (measured against Kafka 4.4; ``AddPartitionsToTxnManager`` then the
    group coordinator's ``handleOperationException``): PRODUCER_FENCED is
    INVALID_PRODUCER_EPOCH; TRANSACTION_ABORTABLE (the group's partition is not in the
    transaction) is INVALID_TXN_STATE before v4; NETWORK_EXCEPTION is
    COORDINATOR_LOAD_IN_PROGRESS (retried without a lookup); the rest as the coordinator's
    write errors map."""
    if code == 0:
        return 0
    if code == PRODUCER_FENCED:
        code = INVALID_PRODUCER_EPOCH
    elif code == TRANSACTION_ABORTABLE and version < ABORTABLE_MIN_TXN_OFFSET_COMMIT_VERSION:
        code = INVALID_TXN_STATE
    return coordinator_error(error_for(code))
