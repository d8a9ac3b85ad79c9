"""KIP-890 verification guards in the log (Kafka's ``VerificationGuard``): a transactional
producer's first batch in a partition lands only with the guard taken before its coordinator
was asked, and only if no transactional batch of the producer (its transaction's marker, say)
reached the log since — so a late "yes, in the transaction" can never start a transaction
here after that transaction ended."""

from __future__ import annotations

import pytest

from strom.common.clock import ManualClock
from strom.common.errors import InvalidTxnStateError
from strom.protocol.records.batch import TRANSACTIONAL_MASK
from strom.storage.log import Log
from strom.storage.log_validator import AppendOrigin
from strom.storage.txn_verification import VerificationGuard
from tests.storage.conftest import OpenLog
from tests.storage.helpers import make_batch, marker_batch, payload, values

PID = 77


def txn(plog: Log, seq: int = 0, *, guard: VerificationGuard | None = None,
        origin: AppendOrigin = AppendOrigin.CLIENT) -> int:
    """Append one transactional data batch of PID (a client's: with a sequence); its offset."""
    batch = make_batch(values(1), producer_id=PID, producer_epoch=0,
                       base_sequence=seq if origin is AppendOrigin.CLIENT else -1,
                       attributes=TRANSACTIONAL_MASK)
    return plog.append(payload(batch), leader_epoch=0, origin=origin,
                       verification_guard=guard).base_offset


def end(plog: Log, *, commit: bool) -> int:
    return plog.append(payload(marker_batch(PID, commit=commit)), leader_epoch=0,
                       origin=AppendOrigin.COORDINATOR).base_offset


@pytest.mark.parametrize("origin", [AppendOrigin.CLIENT, AppendOrigin.COORDINATOR])
def test_a_first_transactional_batch_needs_the_producers_guard(
        open_log: OpenLog, origin: AppendOrigin) -> None:
    plog = open_log(verify_transactions=True)
    with pytest.raises(InvalidTxnStateError, match="not part of an ongoing transaction"):
        txn(plog, origin=origin)
    assert plog.log_end_offset == 0  # nothing appended
    with pytest.raises(InvalidTxnStateError):
        txn(plog, guard=VerificationGuard(), origin=origin)  # somebody else's token
    guard = plog.start_transaction_verification(PID)
    assert guard is not None and plog.start_transaction_verification(PID) is guard
    assert txn(plog, guard=guard, origin=origin) == 0
    # the transaction is open here now: nothing to verify, no guard needed
    assert plog.start_transaction_verification(PID) is None
    assert txn(plog, 1, origin=origin) == 1
    assert len(plog.producer_state.verifications) == 0


def test_a_marker_since_the_guard_was_taken_refuses_the_append(open_log: OpenLog) -> None:
    """The race KIP-890 closes: the leader asks the coordinator (guard taken), the
    transaction is aborted meanwhile (its marker lands here), the coordinator's earlier "yes"
    arrives — the batch must not start a transaction the coordinator does not know of."""
    plog = open_log(verify_transactions=True)
    first = plog.start_transaction_verification(PID)
    assert txn(plog, guard=first) == 0
    stale = plog.start_transaction_verification(PID)
    assert stale is None  # ongoing: later batches of the transaction need no guard
    # the next transaction: verification starts, then an abort marker lands
    end(plog, commit=True)
    guard = plog.start_transaction_verification(PID)
    assert guard is not None
    end(plog, commit=False)  # the (empty here) transaction is aborted meanwhile
    with pytest.raises(InvalidTxnStateError):
        txn(plog, 1, guard=guard)
    assert plog.producer_state.ongoing_transactions() == {}
    assert plog.log_end_offset == 3
    fresh = plog.start_transaction_verification(PID)  # a retry verifies again
    assert fresh is not None and fresh is not guard
    assert txn(plog, 1, guard=fresh) == 3


def test_a_replicated_batch_clears_the_guard(open_log: OpenLog) -> None:
    """A leader that became a follower replicates its producers' batches: a guard it took
    as leader no longer verifies anything."""
    plog = open_log(verify_transactions=True)
    taken = plog.start_transaction_verification(PID)
    data = bytearray(make_batch(values(1), producer_id=PID, producer_epoch=0,
                                base_sequence=0, attributes=TRANSACTIONAL_MASK))
    plog.append_as_follower(payload(data))
    assert not plog.producer_state.verifications.verifies(PID, taken)


def test_retries_are_still_answered_and_guards_expire(open_log: OpenLog,
                                                       clock: ManualClock) -> None:
    plog = open_log(verify_transactions=True)
    guard = plog.start_transaction_verification(PID)
    txn(plog, guard=guard)
    end(plog, commit=True)
    batch = make_batch(values(1), producer_id=PID, producer_epoch=0, base_sequence=0,
                       attributes=TRANSACTIONAL_MASK)
    retry = plog.append(payload(batch), leader_epoch=0)  # no guard: a retry needs none
    assert retry.duplicate and retry.base_offset == 0
    plog.start_transaction_verification(PID)
    clock.advance(plog.settings.producer_expiration_ms)
    plog.remove_expired_producers(clock.now_ms())
    assert len(plog.producer_state.verifications) == 0


def test_verification_off_needs_no_guard(open_log: OpenLog) -> None:
    plog = open_log()  # transaction.partition.verification.enable=false
    assert txn(plog) == 0
