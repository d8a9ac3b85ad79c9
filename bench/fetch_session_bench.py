"""Consume cost of strom builds side by side, with and without incremental fetch sessions
(KIP-227): records/s and the broker's CPU per record, runs interleaved.

    python bench/fetch_session_bench.py --build main=/tmp/main/src --build branch=src \\
        [--records 1000000] [--kp-records 200000] [--rounds 3]

Each ``--build NAME=DIR`` is a source tree put first on the broker's PYTHONPATH (``git archive
main src | tar -x -C /tmp/main`` for the main branch). Every round starts a fresh broker per
build, in a rotated order, produces ``--records`` 100-byte values into 8 partitions and reads
them back with:

* librdkafka (confluent-kafka, ``fetch.queue.backoff.ms=10``): always sessionless, so this
  row shows what sessions cost clients that do not use them;
* kafka-python, ``--kp-records`` of them, with ``enable_incremental_fetch_sessions`` on and off
  (a build without sessions answers both the same way);
* a caught-up consumer of 100 empty partitions, raw Fetch v12 requests back to back
  (``max_wait_ms`` 0) in a session and sessionless: the broker's CPU per fetch and the frame
  sizes.

The table gives the median of the rounds.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import struct
import time
from collections.abc import Callable

from confluent_kafka.admin import AdminClient, NewTopic

from broker_bench import consume, create_topic, measure, produce  # type: ignore[import-not-found]
from brokers import RunningBroker, start_strom  # type: ignore[import-not-found]

PARTITIONS = 8


def kafka_python_consume(broker: RunningBroker, topic: str, n: int, sessions: bool) -> int:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             enable_incremental_fetch_sessions=sessions)
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    consumer.seek_to_beginning()
    count = 0
    deadline = time.monotonic() + 300
    while count < n and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500, max_records=10000).values():
            count += len(records)
    consumer.close()
    return min(count, n)


def _fetch_body(session_id: int, epoch: int, partitions: int) -> bytes:
    from strom.protocol import api

    return api.request(1, 12, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
        "topics": [{"topic": "fs-idle", "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": 0,
             "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}
            for p in range(partitions)]}] if partitions else [],
        "forgotten_topics_data": [], "rack_id": ""})


def idle(broker: RunningBroker, sessions: bool, n: int = 2000) -> tuple[float, int, int]:
    """A caught-up consumer of 100 empty partitions fetching ``n`` times back to back (Fetch
    v12, max_wait_ms 0): (broker CPU ms per fetch, request bytes, response bytes) of the last."""
    with socket.create_connection(("127.0.0.1", broker.port)) as sock:
        correlation = 0

        def call(body: bytes) -> bytes:
            nonlocal correlation
            correlation += 1
            frame = struct.pack(">hhih", 1, 12, correlation, 5) + b"bench\x00" + body
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            size = struct.unpack(">i", _read(sock, 4))[0]
            return _read(sock, size)

        first = call(_fetch_body(0, 0 if sessions else -1, 100))
        session_id = struct.unpack_from(">i", first, 5 + 6)[0]
        cpu0 = broker.cpu_seconds()
        for epoch in range(1, n + 1):
            body = _fetch_body(session_id, epoch, 0) if sessions else _fetch_body(0, -1, 100)
            response = call(body)
        cpu = broker.cpu_seconds() - cpu0
    return cpu / n * 1000, len(body) + 4 + 10 + 5, len(response) + 4


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        out += chunk
    return out


def one_round(broker: RunningBroker, records: int, kp_records: int) -> dict[str, float]:
    out: dict[str, float] = {}
    create_topic(broker, "fs")
    produce(broker, "fs", records, "1")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("fs-idle", 100, 1)])["fs-idle"].result(30)
    rows: dict[str, Callable[[], int]] = {
        "librdkafka": lambda: consume(broker, "fs", records, **{"fetch.queue.backoff.ms": 10}),
        "kafka-python, sessions": lambda: kafka_python_consume(broker, "fs", kp_records, True),
        "kafka-python, no sessions": lambda: kafka_python_consume(broker, "fs", kp_records,
                                                                  False),
    }
    for row, work in rows.items():
        result = measure(broker, work)
        out[f"{row} rec/s"] = result.records_per_s
        out[f"{row} CPU s/M"] = result.cpu_s_per_million
    for sessions in (True, False):
        cpu_ms, request, response = idle(broker, sessions)
        label = "session" if sessions else "sessionless"
        out[f"idle 100 partitions, {label}: broker CPU ms per fetch"] = cpu_ms
        out[f"idle 100 partitions, {label}: request bytes"] = request
        out[f"idle 100 partitions, {label}: response bytes"] = response
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", action="append", required=True, metavar="NAME=DIR")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--kp-records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    builds = [tuple(b.split("=", 1)) for b in args.build]
    runs: dict[str, list[dict[str, float]]] = {}
    for round_ in range(args.rounds):
        shift = round_ % len(builds)
        for name, source in builds[shift:] + builds[:shift]:
            broker = start_strom(name=name, source=source)
            try:
                result = one_round(broker, args.records, args.kp_records)
            finally:
                broker.stop()
            runs.setdefault(name, []).append(result)
            print(f"round {round_} {name}: " + ", ".join(
                f"{k} {v:,.2f}" for k, v in result.items()), flush=True)
    names = [name for name, _ in builds]
    print("\n| row | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for row in runs[names[0]][0]:
        medians = [statistics.median(r[row] for r in runs[name]) for name in names]
        print(f"| {row} | " + " | ".join(f"{m:,.2f}" for m in medians) + " |")


if __name__ == "__main__":
    main()
