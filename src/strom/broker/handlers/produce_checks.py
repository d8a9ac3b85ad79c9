"""The checks a Produce request's records pass before they reach a log, from the request alone.

Kafka runs these in its request handler, before ``ReplicaManager.appendRecords``; what is
inside each batch is checked later by :mod:`strom.storage.log_validator`. Only the first batch
of a partition's records is inspected (its header, not its CRC), as Kafka does:

* :func:`records_error` (Kafka's ``ProduceRequest.validateRecords``, Produce v3+): the records
  hold a batch, the first batch is magic v2 (message formats v0 / v1 are INVALID_RECORD: the
  request versions strom serves only carry v2), zstd only from Produce v7
  (UNSUPPORTED_COMPRESSION_TYPE), and exactly one batch per partition (INVALID_RECORD). A
  trailing partial batch is left to the log, which refuses it with CORRUPT_MESSAGE (Kafka
  would silently drop the partial bytes).
* :func:`has_transactional_batch` and :func:`transactional_id_error`: a request holding a
  transactional batch must name a transactional id (whether the producer's transaction holds
  the partition is the transaction coordinator's answer, asked by the produce handler);
  :func:`transactional_producer` and :func:`producers_error`: its transactional batches
  belong to one producer id and epoch (INVALID_PRODUCER_ID_MAPPING for every partition
  otherwise, as Kafka's ``handleProduceAppend`` refuses the request).
* :func:`verification_error`: the coordinator's verification answer as a producer gets it
  (Kafka 4.4's ``AddPartitionsToTxnManager`` and ``ReplicaManager.handleProduceAppend``,
  measured against a Kafka 4.4 broker): PRODUCER_FENCED is INVALID_PRODUCER_EPOCH;
  TRANSACTION_ABORTABLE (the partition is not in the transaction) is INVALID_TXN_STATE before
  Produce v11; a coordinator that cannot answer now (CONCURRENT_TRANSACTIONS, loading, not
  available, not the coordinator, unreachable) is the retriable NOT_ENOUGH_REPLICAS, which
  older clients retry without a metadata refresh; INVALID_PRODUCER_ID_MAPPING (a producer
  the coordinator does not know) and every other error are passed on.
"""

from __future__ import annotations

import struct

from strom.common.errors import (
    InvalidProducerIdMappingError,
    InvalidRecordError,
    KafkaError,
    NotEnoughReplicasError,
    TransactionalIdAuthorizationFailedError,
    UnsupportedCompressionTypeError,
    error_class,
    error_for,
    error_name,
)
from strom.protocol.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CURRENT_MAGIC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    TRANSACTIONAL_MASK,
    parse_header,
)
from strom.protocol.records.compression import Compression

_LENGTH = struct.Struct(">i")
_ATTRIBUTES = struct.Struct(">h")
#: Produce v7 is the first that may carry zstd batches (KIP-110).
ZSTD_MIN_PRODUCE_VERSION = 7


def _batch_size(records: memoryview, position: int) -> int | None:
    """Bytes of the batch at ``position`` if it is complete (length field included); None
    also for a length below a batch header's (the log refuses that with CORRUPT_MESSAGE)."""
    if len(records) - position < LOG_OVERHEAD:
        return None
    size = _LENGTH.unpack_from(records, position + 8)[0] + LOG_OVERHEAD
    return size if HEADER_SIZE <= size <= len(records) - position else None


def records_error(version: int, records: memoryview) -> KafkaError | None:
    """The error Kafka answers for these records at this Produce version, or None."""
    if len(records) <= MAGIC_OFFSET:
        return InvalidRecordError(f"Produce v{version} records must hold a record batch")
    magic = records[MAGIC_OFFSET]
    if magic != CURRENT_MAGIC:
        return InvalidRecordError(
            f"Produce v{version} only carries record batches with magic 2, not {magic}")
    if (version < ZSTD_MIN_PRODUCE_VERSION and len(records) >= HEADER_SIZE
            and _ATTRIBUTES.unpack_from(records, ATTRIBUTES_OFFSET)[0] & COMPRESSION_MASK
            == Compression.ZSTD):
        return UnsupportedCompressionTypeError(
            f"Produce v{version} may not carry zstd-compressed batches (v7+ may)")
    first = _batch_size(records, 0)
    if first is not None and _batch_size(records, first) is not None:
        return InvalidRecordError(
            f"Produce v{version} carries exactly one record batch per partition")
    return None


def has_transactional_batch(records: memoryview | None) -> bool:
    """Whether the first batch of these records is complete and transactional."""
    if records is None or _batch_size(records, 0) is None or len(records) < HEADER_SIZE:
        return False
    if records[MAGIC_OFFSET] != CURRENT_MAGIC:
        return False
    return bool(_ATTRIBUTES.unpack_from(records, ATTRIBUTES_OFFSET)[0] & TRANSACTIONAL_MASK)


def transactional_id_error(transactional_id: str | None) -> KafkaError | None:
    """A request holding a transactional batch must name its transactional id: Kafka fails
    the whole request with TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise."""
    if transactional_id is None:
        return TransactionalIdAuthorizationFailedError(
            "transactional records need the request's transactional id")
    return None



def transactional_producer(records: memoryview | None) -> tuple[int, int] | None:
    """(producer id, epoch) of the first batch if it is a complete transactional data
    batch, else None."""
    if not has_transactional_batch(records):
        return None
    assert records is not None
    if _ATTRIBUTES.unpack_from(records, ATTRIBUTES_OFFSET)[0] & CONTROL_MASK:
        return None  # the log refuses a client's control batch
    header = parse_header(records)
    return header.producer_id, header.producer_epoch


def producers_error(producers: set[tuple[int, int]]) -> KafkaError | None:
    """The transactional batches of one request must come from one producer id and epoch."""
    if len(producers) > 1:
        return InvalidProducerIdMappingError(
            "Transactional records contained more than one producer ID")
    return None


def _code(name: str) -> int:
    return error_class(name).code


#: Produce v11 is the first whose producers know TRANSACTION_ABORTABLE (KIP-890).
ABORTABLE_MIN_PRODUCE_VERSION = 11
PRODUCER_FENCED = _code("PRODUCER_FENCED")
TRANSACTION_ABORTABLE = _code("TRANSACTION_ABORTABLE")
INVALID_TXN_STATE = _code("INVALID_TXN_STATE")
INVALID_PRODUCER_EPOCH = _code("INVALID_PRODUCER_EPOCH")
_UNVERIFIABLE = frozenset(_code(name) for name in (
    "CONCURRENT_TRANSACTIONS", "NETWORK_EXCEPTION", "COORDINATOR_LOAD_IN_PROGRESS",
    "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR"))


def verification_error(code: int, version: int) -> KafkaError | None:
    """The error a Produce of ``version`` answers for the coordinator's verification
    answer ``code`` (module docstring); None for NONE."""
    if code == 0:
        return None
    if code == PRODUCER_FENCED:
        code = INVALID_PRODUCER_EPOCH
    elif code == TRANSACTION_ABORTABLE and version < ABORTABLE_MIN_PRODUCE_VERSION:
        code = INVALID_TXN_STATE
    if code == INVALID_TXN_STATE:
        return error_for(code, "Partition was not added to the transaction")
    if code in _UNVERIFIABLE:
        return NotEnoughReplicasError(
            "Unable to verify the partition has been added to the transaction. "
            f"Underlying error: {error_name(code)}")
    return error_for(code)
