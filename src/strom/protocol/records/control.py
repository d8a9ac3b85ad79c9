"""Control records: the transaction markers (commit / abort) a control batch carries.

A control batch has attribute bits 4 (transactional) and 5 (control) set, the producer id
and epoch of the transaction it ends, base sequence -1, and exactly one record whose
key and value are (big-endian)::

    key    version int16 (0) | type int16 (0 = abort, 1 = commit)
    value  version int16 (0) | coordinator_epoch int32

Kafka defines further control types (leader change, snapshot markers) for KRaft's own log;
they decode as :attr:`ControlType.UNKNOWN` here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from strom.common.errors import CorruptMessageError
from strom.protocol.records.batch import BatchHeader
from strom.protocol.records.reader import decode_records

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0


class ControlType(IntEnum):
    """Control record types (Kafka's ``ControlRecordType``)."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    """A decoded commit / abort marker."""

    control_type: ControlType
    coordinator_epoch: int

    @property
    def is_commit(self) -> bool:
        return self.control_type is ControlType.COMMIT


def encode_control_key(control_type: ControlType) -> bytes:
    """The 4-byte key of a control record."""
    return _KEY.pack(CONTROL_KEY_VERSION, int(control_type))


def encode_end_txn_marker_value(coordinator_epoch: int) -> bytes:
    """The 6-byte value of a commit / abort marker."""
    return _VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)


def control_type_of(key: bytes | None) -> ControlType:
    """The control type a control record's key names (UNKNOWN for types strom ignores)."""
    if key is None or len(key) < _KEY.size:
        raise CorruptMessageError("control record key shorter than 4 bytes")
    _version, raw_type = _KEY.unpack_from(key)
    try:
        return ControlType(raw_type)
    except ValueError:
        return ControlType.UNKNOWN


def decode_end_txn_marker(key: bytes | None, value: bytes | None) -> EndTxnMarker:
    """Decode a commit / abort marker from a control record's key and value."""
    control_type = control_type_of(key)
    if control_type not in (ControlType.ABORT, ControlType.COMMIT):
        raise CorruptMessageError("control record is not a transaction marker")
    if value is None or len(value) < _VALUE.size:
        raise CorruptMessageError("transaction marker value shorter than 6 bytes")
    _version, coordinator_epoch = _VALUE.unpack_from(value)
    return EndTxnMarker(control_type, coordinator_epoch)


def read_end_txn_marker(buf: bytes | bytearray | memoryview, header: BatchHeader
                        ) -> EndTxnMarker | None:
    """The commit / abort marker of the control batch ``header`` describes (its position is
    relative to ``buf``); None when the batch holds no record (the log cleaner emptied it) or
    its record is another control type. CorruptMessageError for a malformed marker."""
    if not header.is_control or header.records_count == 0:
        return None
    records = decode_records(buf, header)
    if not records or control_type_of(records[0].key) is ControlType.UNKNOWN:
        return None
    return decode_end_txn_marker(records[0].key, records[0].value)
