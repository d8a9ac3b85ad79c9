"""``strom dump-log PATH...``: inspect segment and index files offline (like kafka-dump-log).

PATH may be a ``.log`` segment, a ``.index`` / ``.timeindex`` file, or a partition directory
(every segment in it, in offset order). For segments: one line per batch (offset range,
position, size, count, timestamps, codec, producer id / epoch / sequence, CRC validity),
``--records`` adds the decoded records, ``--verify-index`` checks the segment's indexes
against it. For index files: their entries (verified against the segment with
``--verify-index``). Files are only read, so a live data directory is safe to inspect.
The exit status is 1 when a problem was found (bad CRC, torn batch, index mismatch).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from strom.cli.common import UsageError, positive
from strom.common.errors import KafkaError
from strom.protocol.records.reader import decode_batches
from strom.storage.dump import (
    BatchInfo,
    IndexCheck,
    dump_segment,
    offset_index_entries,
    time_index_entries,
    verify_offset_index,
    verify_time_index,
)
from strom.storage.files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dump-log", help="print the batches / entries of log and index files",
                       description="Inspect segment (.log), .index and .timeindex files "
                                   "offline. Exit status 1 if a problem is found.")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="segment or index files, or partition directories")
    p.add_argument("--records", "--print-data-log", action="store_true", dest="records",
                   help="also decode and print every record")
    p.add_argument("--verify-index", action="store_true",
                   help="check the offset and time indexes against their segment")
    p.add_argument("--max-bytes", type=positive, default=200, metavar="N",
                   help="with --records, print at most N bytes of each key / value (default 200)")
    p.set_defaults(run=run)


def _expand(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            segments = sorted(path.glob(f"*{LOG_SUFFIX}"))
            if not segments:
                raise UsageError(f"{raw}: no {LOG_SUFFIX} segment files in this directory")
            out.extend(segments)
        elif path.exists():
            if path.suffix not in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                raise UsageError(f"{raw}: not a {LOG_SUFFIX}, {INDEX_SUFFIX} or "
                                 f"{TIME_INDEX_SUFFIX} file")
            out.append(path)
        else:
            raise UsageError(f"{raw}: no such file or directory")
    return out


def run(args: argparse.Namespace) -> int:
    problems = 0
    for path in _expand(args.paths):
        print(f"Dumping {path}")
        if path.suffix == LOG_SUFFIX:
            problems += _dump_segment(path, args)
        elif path.suffix == INDEX_SUFFIX:
            problems += _dump_offset_index(path, args.verify_index)
        else:
            problems += _dump_time_index(path, args.verify_index)
    return 1 if problems else 0


def format_batch(b: BatchInfo) -> str:
    last_sequence = -1 if b.base_sequence < 0 else \
        (b.base_sequence + b.last_offset - b.base_offset) % 2**31
    kind = "LogAppendTime" if b.is_log_append_time else "CreateTime"
    return (
        f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: {b.record_count} "
        f"baseSequence: {b.base_sequence} lastSequence: {last_sequence} "
        f"producerId: {b.producer_id} producerEpoch: {b.producer_epoch} "
        f"partitionLeaderEpoch: {b.partition_leader_epoch} "
        f"isTransactional: {str(b.is_transactional).lower()} "
        f"isControl: {str(b.is_control).lower()} position: {b.position} "
        f"baseTimestamp: {b.base_timestamp} {kind}: {b.max_timestamp} size: {b.size} "
        f"magic: 2 compresscodec: {b.codec} crcValid: {str(b.crc_valid).lower()}"
    )


def _dump_segment(path: Path, args: argparse.Namespace) -> int:
    dump = dump_segment(path)
    print(f"Log starting offset: {dump.base_offset}")
    records = 0
    fd = os.open(path, os.O_RDONLY) if args.records else -1
    try:
        for batch in dump.batches:
            print(format_batch(batch))
            records += batch.record_count
            if args.records:
                _print_records(os.pread(fd, batch.size, batch.position), args.max_bytes)
    finally:
        if fd >= 0:
            os.close(fd)
    problems = 0
    print(f"Summary: {len(dump.batches)} batches, {records} records, {dump.valid_bytes} of "
          f"{dump.file_size} bytes valid")
    if dump.problem:
        print(f"PROBLEM: {dump.problem}")
        problems += 1
    if args.verify_index:
        problems += _report(verify_offset_index(path))
        problems += _report(verify_time_index(path))
    return problems


def _print_records(data: bytes, max_bytes: int) -> None:
    try:
        batches = list(decode_batches(data, verify_crc=False))
    except KafkaError as exc:
        print(f"| records unreadable: {exc}")
        return
    for header, records in batches:
        kind = "LogAppendTime" if header.is_log_append_time else "CreateTime"
        for i, r in enumerate(records):
            sequence = -1 if header.base_sequence < 0 else \
                (header.base_sequence + r.offset - header.base_offset) % 2**31
            head_keys = ",".join(k for k, _ in r.headers)
            print(
                f"| offset: {r.offset} {kind}: {r.timestamp} "
                f"keySize: {_size(r.key)} valueSize: {_size(r.value)} sequence: {sequence} "
                f"headerKeys: [{head_keys}] key: {_show(r.key, max_bytes)} "
                f"payload: {_show(r.value, max_bytes)}"
                + (" (control record)" if header.is_control and i == 0 else "")
            )


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _show(data: bytes | None, max_bytes: int) -> str:
    if data is None:
        return "null"
    text = data[:max_bytes].decode("utf-8", "backslashreplace")
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    return text + (f"...(+{len(data) - max_bytes} bytes)" if len(data) > max_bytes else "")


def _report(check: IndexCheck) -> int:
    if check.ok:
        print(f"Index {check.path.name}: {check.entries} entries, OK")
        return 0
    print(f"Index {check.path.name}: {check.entries} entries, {len(check.problems)} problem(s)")
    for problem in check.problems:
        print(f"PROBLEM: {problem}")
    return 1


def _dump_offset_index(path: Path, verify: bool) -> int:
    for entry in offset_index_entries(path):
        print(f"offset: {entry.offset} position: {entry.position}")
    if verify:
        return _report(verify_offset_index(_segment_for(path), path))
    return 0


def _dump_time_index(path: Path, verify: bool) -> int:
    for entry in time_index_entries(path):
        print(f"timestamp: {entry.timestamp} offset: {entry.offset}")
    if verify:
        return _report(verify_time_index(_segment_for(path), path))
    return 0


def _segment_for(index: Path) -> Path:
    segment = index.with_suffix(LOG_SUFFIX)
    if not segment.exists():
        raise UsageError(f"{index}: cannot verify, segment {segment.name} is missing")
    return segment
