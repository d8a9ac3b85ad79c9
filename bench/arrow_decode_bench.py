"""Spark read path: decoding fetched record batches into Arrow, old path vs columnar decoder.

    python bench/arrow_decode_bench.py [--records 1000000] [--batch-records 2000]
        [--value-bytes 100] [--key-bytes 10] [--codecs none,lz4] [--headers] [--repeat 3]

Builds ``--records`` records (``--key-bytes`` keys, ``--value-bytes`` values; half random
bytes, half a repeated pattern, so compression has something to do) in batches of
``--batch-records``, groups the batches into 4 MiB record sets (what one Fetch returns to
the Spark reader), then times, single process, best of ``--repeat``:

* ``old``: ``decode_batches`` → per-record Python lists → ``pa.array`` columns, the path
  ``partition_reader`` used before ``arrow_records`` (reproduced here);
* ``new``: :func:`strom.spark.arrow_records.decode_to_arrow`.

Both produce the same ``pyarrow.RecordBatch`` (checked on the first record set). Each
layout is run with fixed-size values and with sizes varying ±20 % (the columnar decoder
has a vectorised fast path for equal-size records; the varied run shows the general path).
Prints a Markdown table: records/s and µs/record.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from strom.protocol.records.builder import BatchBuilder
from strom.protocol.records.compression import codec_from_name
from strom.protocol.records.reader import decode_batches
from strom.spark.arrow_records import decode_to_arrow
from strom.spark.schema import arrow_schema

FETCH_BYTES = 4 * 1024 * 1024
TOPIC = "bench-topic"
PARTITION = 0


def make_record_sets(args: argparse.Namespace, codec: int, varied: bool) -> list[bytes]:
    """The records as 4 MiB record sets of complete batches (like Fetch responses)."""
    rng = random.Random(7)
    pattern = bytes(range(256)) * (args.value_bytes // 256 + 2)
    now = 1_760_000_000_000
    batches: list[bytes] = []
    offset = 0
    while offset < args.records:
        builder = BatchBuilder(compression=codec, base_offset=offset)
        for i in range(min(args.batch_records, args.records - offset)):
            size = args.value_bytes
            if varied:
                size = rng.randint(size * 4 // 5, size * 6 // 5)
            half = size // 2
            value = rng.randbytes(half) + pattern[i % 256 : i % 256 + size - half]
            key = (b"k%0*d" % (args.key_bytes - 1, (offset + i) % 10 ** (args.key_bytes - 1)))
            headers = [("trace", b"%08d" % i)] if args.headers else []
            builder.append(now + i, key, value, headers)
        batches.append(builder.build())
        offset += builder.records_count
    return _group(batches)


def _group(batches: list[bytes]) -> list[bytes]:
    sets: list[bytes] = []
    current: list[bytes] = []
    size = 0
    for batch in batches:
        if current and size + len(batch) > FETCH_BYTES:
            sets.append(b"".join(current))
            current, size = [], 0
        current.append(batch)
        size += len(batch)
    if current:
        sets.append(b"".join(current))
    return sets


def old_path(raw: bytes, include_headers: bool) -> pa.RecordBatch:
    """The pre-columnar reader: decoded records appended to lists, then ``pa.array``."""
    schema = arrow_schema(include_headers)
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    offsets: list[int] = []
    timestamps: list[int] = []
    types: list[int] = []
    headers: list[list[dict[str, Any]]] = []
    for header, records in decode_batches(raw):
        if header.is_control:
            continue
        timestamp_type = 1 if header.is_log_append_time else 0
        for r in records:
            keys.append(r.key)
            values.append(r.value)
            offsets.append(r.offset)
            timestamps.append(r.timestamp)
            types.append(timestamp_type)
            if include_headers:
                headers.append([{"key": k, "value": v} for k, v in r.headers])
    n = len(offsets)
    arrays = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.array([TOPIC] * n, pa.string()),
        pa.array([PARTITION] * n, pa.int32()),
        pa.array(offsets, pa.int64()),
        pa.array([t * 1000 for t in timestamps], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array(types, pa.int32()),
    ]
    if include_headers:
        arrays.append(pa.array(headers, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def new_path(raw: bytes, include_headers: bool) -> pa.RecordBatch:
    batch, _ = decode_to_arrow(raw, TOPIC, PARTITION, 0, 2**62, include_headers)
    assert batch is not None
    return batch


def best_time(decode: Callable[[bytes, bool], pa.RecordBatch], sets: list[bytes],
              include_headers: bool, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for raw in sets:
            decode(raw, include_headers)
        best = min(best, time.perf_counter() - started)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--batch-records", type=int, default=2000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--key-bytes", type=int, default=10)
    parser.add_argument("--codecs", default="none,lz4")
    parser.add_argument("--headers", action="store_true", help="one header per record, read")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"`python {' '.join(sys.argv)}`\n")
    print("| codec | values | path | records/s | µs/record | speed-up |")
    print("|---|---|---|---:|---:|---:|")
    for name in args.codecs.split(","):
        for varied in (False, True):
            sets = make_record_sets(args, codec_from_name(name), varied)
            if not old_path(sets[0], args.headers).equals(new_path(sets[0], args.headers)):
                raise SystemExit("the decoders disagree")
            old = best_time(old_path, sets, args.headers, args.repeat)
            new = best_time(new_path, sets, args.headers, args.repeat)
            sizes = "±20 %" if varied else "fixed"
            for path, seconds in (("old", old), ("new", new)):
                print(f"| {name} | {sizes} | {path} | {args.records / seconds:,.0f} | "
                      f"{seconds / args.records * 1e6:.3f} | "
                      f"{'' if path == 'old' else f'{old / new:.1f}x'} |", flush=True)


if __name__ == "__main__":
    main()
