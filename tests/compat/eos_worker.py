"""The application of tests/compat/test_exactly_once.py, run as its own process (the test
kills it with SIGKILL): a consume-transform-produce loop with confluent-kafka.

``python eos_worker.py BOOTSTRAP INPUT OUTPUT SEED [stay]``: a read_committed consumer of INPUT in
group ``eos-group`` (static member ``eos-worker-0``, no auto-commit) and the transactional
producer ``eos-worker``; each transaction takes a few records, writes ``out:<value>`` with
the same key to the same partition of OUTPUT and commits the consumer's positions with
``send_offsets_to_transaction``. Prints ``ready`` once ``init_transactions`` returned; exits
0 once the group's committed offsets reach the end of every INPUT partition — unless ``stay``
is given: then it keeps polling for more input until it is killed."""

from __future__ import annotations

import random
import sys

from confluent_kafka import Consumer, Producer, TopicPartition

GROUP = "eos-group"
TRANSACTIONAL_ID = "eos-worker"


def main(bootstrap: str, source: str, sink: str, seed: int, stay: bool = False) -> int:
    rng = random.Random(seed)
    # A short retry backoff: the next transaction's AddOffsetsToTxn often finds the previous
    # one still completing (CONCURRENT_TRANSACTIONS, retriable), as with Kafka.
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": TRANSACTIONAL_ID,
                         "linger.ms": 2, "retry.backoff.ms": 10})
    producer.init_transactions(60)  # fences and aborts what the killed incarnation left
    print("ready", flush=True)
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": GROUP, "group.instance.id": "eos-worker-0",
        "enable.auto.commit": False, "isolation.level": "read_committed",
        "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
        "fetch.wait.max.ms": 100,
    })
    consumer.subscribe([source])
    while True:
        messages = consumer.consume(num_messages=rng.randint(1, 16), timeout=0.5)
        records = [m for m in messages if m.error() is None]
        if not records:
            if not stay and finished(consumer, producer, source):
                consumer.close()
                return 0
            continue
        producer.begin_transaction()
        for message in records:
            producer.produce(sink, key=message.key(), value=b"out:" + message.value(),
                             partition=message.partition())
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)


def finished(consumer: Consumer, producer: Producer, source: str) -> bool:
    """Whether the group's committed offsets are at the end of every partition."""
    partitions = consumer.list_topics(source, 10).topics[source].partitions
    tps = [TopicPartition(source, p) for p in partitions]
    committed = consumer.committed(tps, 10)
    ends = [consumer.get_watermark_offsets(tp, 10)[1] for tp in tps]
    return [tp.offset for tp in committed] == ends


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]),
                  sys.argv[5:] == ["stay"]))
