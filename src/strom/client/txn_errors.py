"""What a transactional producer raises, by what the application may do next.

Kafka's Java producer sorts transactional failures into two kinds, and so does strom's:

- **fatal** (:class:`FatalTransactionError`; :class:`FencedProducerError` when a newer
  producer with the same ``transactional_id`` took over): the producer can do nothing more —
  every later call raises the same error; close it (and, when fenced, stop: the successor
  owns the work). Raised for PRODUCER_FENCED and INVALID_PRODUCER_EPOCH from the transaction
  coordinator, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED,
  UNSUPPORTED_VERSION, INVALID_TXN_STATE from the coordinator, and unexpected errors.
- **abortable** (:class:`AbortableTransactionError`): the current transaction cannot commit,
  but the producer is fine: call ``abort_transaction()`` (the only call allowed), then start
  again. Raised when a record of the transaction failed to be delivered (its error is the
  cause: INVALID_TXN_STATE or INVALID_PRODUCER_EPOCH from Produce, a timeout, …), for
  TOPIC_AUTHORIZATION_FAILED / GROUP_AUTHORIZATION_FAILED, for offsets the group refused
  (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID) and for TRANSACTION_ABORTABLE.

Both carry ``cause`` (the :class:`~strom.common.errors.KafkaError` behind them, or None) and
``code`` (its error code, -1 without one). Calls made in the wrong state (``send`` outside a
transaction, ``commit_transaction`` twice, …) raise :class:`TransactionStateError`, as Java
raises IllegalStateException; records that were still waiting to be sent when their
transaction was aborted fail with :class:`TransactionAbortedError`.
"""

from __future__ import annotations

from strom.common.errors import KafkaError, StromError


class TransactionError(StromError):
    """A transactional operation failed; see :class:`FatalTransactionError` and
    :class:`AbortableTransactionError` for what may follow."""

    fatal = False
    abortable = False

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        detail = f"{message}: {cause}" if cause is not None else message
        super().__init__(detail)
        self.message = detail
        self.cause = cause

    @property
    def code(self) -> int:
        """The Kafka error code behind this error (-1 when none)."""
        return self.cause.code if isinstance(self.cause, KafkaError) else -1


class FatalTransactionError(TransactionError):
    """The producer cannot continue: close it."""

    fatal = True


class FencedProducerError(FatalTransactionError):
    """A newer producer with the same transactional id fenced this one (PRODUCER_FENCED, or
    INVALID_PRODUCER_EPOCH from the transaction coordinator): Java's ProducerFencedException."""


class AbortableTransactionError(TransactionError):
    """The transaction must be aborted (``abort_transaction()``); the producer stays usable:
    Java's TransactionAbortableException and the other abortable errors."""

    abortable = True


class TransactionStateError(StromError):
    """A transactional call in a state that does not allow it (send before
    ``begin_transaction()``, ``begin_transaction()`` twice, a transactional call on a
    producer without ``transactional_id``, …)."""


class TransactionAbortedError(StromError):
    """The record was never sent: its transaction was aborted first."""
