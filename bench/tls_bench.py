"""Consume throughput and broker CPU through a PLAINTEXT and an SSL listener of one broker.

``PYTHONPATH=src python bench/tls_bench.py [--records N] [--runs R]`` produces N 100-byte
records to an 8-partition topic, then reads them all R times per listener (alternating) with
a librdkafka consumer, and prints a Markdown table: records/s and broker CPU seconds per
million records consumed (from /proc). Plain TCP serves large fetch regions with sendfile;
TLS reads them with pread in 256 KiB chunks and encrypts in Python's ssl module. Test
certificates are made with the openssl command, as in the security tests.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.broker.security.certs import KEY_PASSWORD, make_certs

from strom.testing import EmbeddedBroker

PARTITIONS = 8
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def consume(conf: dict[str, str], topic: str, total: int) -> float:
    consumer = Consumer({**conf, "group.id": f"bench-{time.monotonic_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen, started = 0, time.perf_counter()
    while seen < total:
        for msg in consumer.consume(10000, 1.0):
            if msg.error() is None:
                seen += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    certs = make_certs(Path(tempfile.mkdtemp(prefix="tls-bench-")))
    config = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
              "ssl.keystore.location": str(certs.broker_keystore),
              "ssl.key.password": KEY_PASSWORD}
    with EmbeddedBroker(config) as broker:
        assert broker.process is not None
        plain = {"bootstrap.servers": broker.bootstrap_of("PLAINTEXT")}
        tls = {"bootstrap.servers": broker.bootstrap_of("SSL"), "security.protocol": "SSL",
               "ssl.ca.location": str(certs.ca)}
        admin = AdminClient(plain)
        admin.create_topics([NewTopic("tls-bench", PARTITIONS, 1)])["tls-bench"].result(30)
        producer = Producer({**plain, "linger.ms": 20, "batch.size": 1_000_000})
        value = b"x" * 100
        for i in range(args.records):
            while True:
                try:
                    producer.produce("tls-bench", value, partition=i % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.flush(120)
        rows = []
        for run in range(args.runs):
            for name, conf in (("PLAINTEXT", plain), ("SSL", tls)):
                before = cpu_s(broker.process.pid)
                elapsed = consume(conf, "tls-bench", args.records)
                cpu = cpu_s(broker.process.pid) - before
                rows.append((run + 1, name, args.records / elapsed,
                             cpu / (args.records / 1e6)))
    print("| run | listener | records/s | broker CPU s per M records |")
    print("|---|---|---|---|")
    for run, name, rate, cpu in rows:
        print(f"| {run} | {name} | {rate / 1e6:.2f} M | {cpu:.2f} |")


if __name__ == "__main__":
    main()
