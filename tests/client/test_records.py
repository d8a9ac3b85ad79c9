"""strom.client.records: the ConsumerRecord layout the record decoder fills, in C and in
Python."""

from __future__ import annotations

import struct

import pytest

from strom.client.records import ConsumerRecord, consumer_record_layout
from strom.protocol.records import reader
from strom.protocol.records.batch import parse_header
from strom.protocol.records.builder import BatchBuilder
from strom.protocol.records.reader import decode_record_tuples
from tests.native_twins import choose_implementation

NOW = 1_700_000_000_000


@pytest.fixture(autouse=True, params=["native", "python"])
def implementation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    return choose_implementation(request, monkeypatch, reader, "native_decode")


def test_the_consumer_layout_builds_consumer_records() -> None:
    builder = BatchBuilder()
    builder.append(NOW, None, b"v", [("h\u00e9", None)])
    builder.append(NOW + 1, b"k", None)
    batch = bytearray(builder.build())
    struct.pack_into(">q", batch, 0, 40)  # base offset and leader epoch: outside the CRC
    struct.pack_into(">i", batch, 12, 9)
    header = parse_header(batch)
    layout = consumer_record_layout("t", 2, 1, header.partition_leader_epoch)
    records = decode_record_tuples(memoryview(batch), header, layout)
    assert records == [
        ConsumerRecord("t", 2, 40, NOW, 1, None, b"v", (("h\u00e9", None),), 9),
        ConsumerRecord("t", 2, 41, NOW + 1, 1, b"k", None, (), 9),
    ]
    assert all(type(r) is ConsumerRecord for r in records)
    assert records[1].headers == () and records[0].key is None and records[1].value is None
