"""The leader's record checks (Kafka's LogValidator): structure, client-only rules, codecs,
and record-level errors — on their own, and through Log.append (nothing written on refusal).

Every test runs twice: with the C record scan (when it is built) and with its Python twin;
one test compares the two on mutated input."""

from __future__ import annotations

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from strom.common.errors import (
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    UnsupportedCompressionTypeError,
)
from strom.protocol.records.batch import (
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    iter_batches,
    parse_header,
)
from strom.protocol.records.builder import BatchBuilder, build_control_batch
from strom.protocol.records.compression import Compression
from strom.protocol.records.control import ControlType
from strom.protocol.records.reader import decode_batches
from strom.storage import log_validator
from strom.storage.log import LogSettings
from strom.storage.log_validator import (
    AppendOrigin,
    scan_records,
    scan_records_python,
    validate_batch,
)
from tests.native_twins import choose_implementation
from tests.storage.conftest import OpenLog
from tests.storage.helpers import (
    NOW,
    batch_around,
    encode_record,
    make_batch,
    payload,
    read_all,
    topic_config,
    varint,
)

NATIVE = log_validator.native_scan


@pytest.fixture(autouse=True, params=["native", "python"])
def implementation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    return choose_implementation(request, monkeypatch, log_validator, "native_scan")


def check(batch: bytes | bytearray, *, origin: AppendOrigin = AppendOrigin.CLIENT,
          now: int = NOW, **config: object) -> int:
    view = memoryview(bytearray(batch))
    (header,) = iter_batches(view)
    return validate_batch(view, header, LogSettings(topic_config(**config)), now, origin, "t-0")


def refused(batch: bytes | bytearray, **kwargs: object) -> KafkaError:
    with pytest.raises(KafkaError) as info:
        check(batch, **kwargs)  # type: ignore[arg-type]
    return info.value


# -- structure ---------------------------------------------------------------------------------
def test_well_formed_batches_pass_and_report_their_max_timestamp() -> None:
    builder = BatchBuilder()
    stamps = [NOW + (i * 7) % 500 - 100 for i in range(300)]
    for i, ts in enumerate(stamps):  # offset deltas past 63 take two varint bytes
        builder.append(ts, f"k{i}".encode() if i % 3 else None, b"v" * (i % 200),
                       [("h", b"x"), ("e", None)] if i % 5 == 0 else [])
    assert check(builder.build()) == max(stamps)
    for codec in (Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD):
        compressed = BatchBuilder(compression=codec)
        for i in range(50):
            compressed.append(NOW + i, None, b"value %d" % i)
        assert check(compressed.build()) == NOW + 49


@pytest.mark.parametrize("records, count, reason", [
    (b"\x00" * 40, 3, "garbage"),
    (encode_record(0, 0, None, b"a") + encode_record(1, 0, None, b"b"), 3, "fewer records"),
    (encode_record(0, 0, None, b"a") + encode_record(1, 0, None, b"b"), 1, "bytes left"),
    (encode_record(0, 0, None, b"a") + encode_record(5, 0, None, b"b"), 2, "offset delta"),
    (varint(9) + b"\x00\x00\x00" + varint(20) + b"abc" + b"\x01\x00", 1, "key past record"),
    (varint(7) + b"\x00\x00\x00\x01" + varint(-3) + b"\x00\x00", 1, "value length -3"),
    (varint(-8) + b"\x00" * 10, 1, "negative length"),
    (varint(8) + b"\x00\x00\x00\x01\x01" + varint(1) + varint(-1) + varint(-1), 1,
     "null header key"),
    (varint(9) + b"\x00\x00\x00\x01\x01" + varint(1) + varint(1) + b"\xff" + varint(-1),
     1, "header key not UTF-8"),
    (varint(7) + b"\x00" + b"\xff" * 11, 1, "overlong varint"),
])
def test_malformed_records_are_invalid_record(records: bytes, count: int, reason: str) -> None:
    error = refused(batch_around(records, count))
    assert isinstance(error, InvalidRecordError), reason
    assert not error.record_errors and "t-0" in error.message


def test_undecodable_compressed_payload_is_invalid_record() -> None:
    for codec in (Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD):
        error = refused(batch_around(b"definitely not compressed data", 1, attributes=codec))
        assert isinstance(error, InvalidRecordError), codec
    inner = encode_record(0, 0, None, b"a") + b"junk"
    compressed = bytes(cramjam.zstd.compress(inner))
    error = refused(batch_around(compressed, 1, attributes=Compression.ZSTD))
    assert isinstance(error, InvalidRecordError)


def test_unknown_codec_is_unsupported_compression_type() -> None:
    for codec in (5, 6, 7):
        error = refused(batch_around(encode_record(0, 0, None, b"a"), 1, attributes=codec))
        assert isinstance(error, UnsupportedCompressionTypeError)


# -- client-only rules -------------------------------------------------------------------------
def test_client_rules_and_what_coordinators_may_write() -> None:
    one = encode_record(0, 0, None, b"a")
    assert isinstance(refused(batch_around(b"", 0, last_delta=0)), InvalidRecordError)
    assert isinstance(refused(batch_around(one, 1, last_delta=4)), InvalidRecordError)
    assert isinstance(refused(batch_around(one, 1, producer_id=5)), InvalidRecordError)  # no seq
    error = refused(batch_around(one, 1, base_offset=3))
    assert isinstance(error, InvalidRecordError) and "base offset" in error.message
    marker = build_control_batch(ControlType.COMMIT, producer_id=5, producer_epoch=0,
                                 coordinator_epoch=1, timestamp=NOW)
    error = refused(marker)
    assert isinstance(error, InvalidRecordError) and "control" in error.message
    assert check(marker, origin=AppendOrigin.COORDINATOR) == NOW
    # Control batches on a compact topic are not subject to the key rule (they hold keys).
    assert check(marker, origin=AppendOrigin.COORDINATOR, cleanup_policy="compact") == NOW
    transactional = batch_around(one, 1, attributes=TRANSACTIONAL_MASK, producer_id=5,
                              base_sequence=0)
    assert check(transactional) == NOW  # whether a transaction is open is not the log's call


# -- record-level errors -----------------------------------------------------------------------
def test_keyless_records_on_a_compacted_topic_are_listed() -> None:
    builder = BatchBuilder()
    for i in range(12):
        builder.append(NOW, None if i % 5 == 0 else b"k", b"v")
    batch = builder.build()
    assert check(batch) == NOW  # delete policy: keys are optional
    error = refused(batch, cleanup_policy="compact")
    assert isinstance(error, InvalidRecordError)
    assert [index for index, _ in error.record_errors] == [0, 5, 10]
    assert all("without key in topic partition t-0" in (m or "") for _, m in error.record_errors)
    assert "3 record error(s)" in error.message


def test_timestamps_out_of_range_are_listed_and_win_over_key_errors() -> None:
    builder = BatchBuilder()
    hour = 3_600_000
    stamps = [NOW, NOW + 2 * hour, NOW - 10, NOW + hour + 1, -1]
    for i, ts in enumerate(stamps):
        builder.append(ts, None if i == 0 else b"k", b"v")
    batch = builder.build()
    error = refused(batch)  # after.max.ms defaults to one hour
    assert isinstance(error, InvalidTimestampError)
    assert [index for index, _ in error.record_errors] == [1, 3]
    assert str(NOW + 2 * hour) in (error.record_errors[0][1] or "")
    error = refused(batch, cleanup_policy="compact")
    assert isinstance(error, InvalidTimestampError)  # one timestamp error decides the code
    assert [index for index, _ in error.record_errors] == [0, 1, 3]
    error = refused(batch, message_timestamp_before_max_ms=5)
    assert [index for index, _ in error.record_errors] == [1, 2, 3]  # -1 has no timestamp
    assert check(batch, message_timestamp_after_max_ms=3 * hour) == NOW + 2 * hour
    assert check(batch, message_timestamp_type="LogAppendTime") == NOW + 2 * hour  # not checked


def test_producer_log_append_time_batches() -> None:
    one = encode_record(0, 0, b"k", b"a") + encode_record(1, 3, b"k", b"b")
    batch = batch_around(one, 2, attributes=TIMESTAMP_TYPE_MASK, max_ts=NOW + 99)
    error = refused(batch, message_timestamp_type="LogAppendTime")
    assert isinstance(error, InvalidTimestampError)
    assert [index for index, _ in error.record_errors] == [0, 1]
    assert check(batch) == NOW + 3  # CreateTime topic: the records' own timestamps count


# -- through the log ---------------------------------------------------------------------------
def test_log_append_refuses_all_or_nothing_and_fixes_max_timestamp(open_log: OpenLog) -> None:
    plog = open_log()
    good = make_batch([b"a", b"b"], timestamps=[NOW, NOW + 5])
    bad = batch_around(b"\x00" * 30, 2)
    with pytest.raises(InvalidRecordError):
        plog.append(payload(good, bad), leader_epoch=0, now_ms=NOW)
    assert plog.log_end_offset == 0
    lying = batch_around(encode_record(0, 0, None, b"a") + encode_record(1, 7, None, b"b"), 2,
                      attributes=TIMESTAMP_TYPE_MASK, max_ts=NOW + 10**9)
    plog.append(payload(lying), leader_epoch=0, now_ms=NOW)
    ((header, records),) = list(decode_batches(read_all(plog)))
    assert header.max_timestamp == NOW + 7 and not header.is_log_append_time
    assert [r.timestamp for r in records] == [NOW, NOW + 7]
    assert plog.max_timestamp()[1] == NOW + 7  # type: ignore[index]


# -- properties --------------------------------------------------------------------------------
_records = st.lists(st.tuples(
    st.integers(-5000, 5000), st.one_of(st.none(), st.binary(max_size=80)),
    st.one_of(st.none(), st.binary(max_size=200)),
    st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))),
             max_size=2)), min_size=1, max_size=90)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_records)
def test_scan_agrees_with_the_record_decoder(records: list[tuple[int, bytes | None,
                                                                  bytes | None,
                                                                  list[tuple[str, bytes | None]]]]
                                             ) -> None:
    builder = BatchBuilder()
    for delta, key, value, headers in records:
        builder.append(NOW + delta, key, value, headers)
    batch = builder.build()
    header = parse_header(batch)
    low, high, keyless = scan_records(batch, HEADER_SIZE, len(batch), header.records_count)
    stamps = [NOW + delta for delta, *_ in records]
    assert (header.base_timestamp + low, header.base_timestamp + high) == (min(stamps),
                                                                            max(stamps))
    assert keyless == [i for i, (_, key, _, _) in enumerate(records) if key is None]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_an_accepted_batch_is_readable_by_every_decoder(data: st.DataObject) -> None:
    """Mutate the records of a valid batch (CRC recomputed): the validator either refuses it
    with INVALID_RECORD or strom's reader and kafka-python's both decode every record."""
    builder = BatchBuilder()
    for i in range(data.draw(st.integers(1, 6))):
        builder.append(NOW + i, data.draw(st.one_of(st.none(), st.binary(max_size=4))),
                       data.draw(st.binary(max_size=6)), [("h", b"1")] if i == 2 else [])
    original = builder.build()
    records = bytearray(original[HEADER_SIZE:])
    for _ in range(data.draw(st.integers(1, 3))):
        position = data.draw(st.integers(0, len(records) - 1))
        records[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, 2))
    records = records[: len(records) - cut] if cut else records
    header = parse_header(original)
    batch = batch_around(bytes(records), header.records_count)
    try:
        check(batch, message_timestamp_before_max_ms=2**62, message_timestamp_after_max_ms=2**62)
    except (InvalidRecordError, InvalidTimestampError):  # never IndexError & co.
        return
    ((_, decoded),) = list(decode_batches(bytes(batch)))
    assert len(decoded) == header.records_count
    assert len(list(DefaultRecordBatch(bytes(batch)))) == header.records_count



@settings(max_examples=300, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.data())
def test_the_c_scan_and_its_python_twin_agree(implementation: str, data: st.DataObject) -> None:
    if NATIVE is None or implementation == "python":
        pytest.skip("compares the C scan with the Python one")
    builder = BatchBuilder()
    for i in range(data.draw(st.integers(1, 70))):
        builder.append(NOW + data.draw(st.integers(-10**6, 10**6)),
                       data.draw(st.one_of(st.none(), st.binary(max_size=70))),
                       data.draw(st.one_of(st.none(), st.binary(max_size=150))),
                       [("k\u00e9", b"v"), ("x", None)] if i % 7 == 3 else [])
    batch = bytearray(builder.build())
    for _ in range(data.draw(st.integers(0, 4))):
        position = data.draw(st.integers(HEADER_SIZE, len(batch) - 1))
        batch[position] = data.draw(st.integers(0, 255))
    end = len(batch) - data.draw(st.integers(0, 3))
    count = parse_header(batch).records_count + data.draw(st.sampled_from([0, 0, 0, 1, -1]))
    view = memoryview(batch)
    outcomes = []
    for scan in (lambda: NATIVE(view, HEADER_SIZE, end, count, True),
                 lambda: scan_records_python(view, HEADER_SIZE, end, count)):
        try:
            outcomes.append(scan())
        except (ValueError, InvalidRecordError) as exc:
            message = exc.message if isinstance(exc, InvalidRecordError) else str(exc)
            outcomes.append(message.removeprefix("invalid record structure: "))
    assert outcomes[0] == outcomes[1]
