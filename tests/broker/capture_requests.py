"""Capture the requests real clients send to strom, as seeds for the request fuzz test.

Run ``PYTHONPATH=src python -m tests.broker.capture_requests`` to regenerate
``tests/broker/data/client_requests.json``. A recording TCP proxy sits in front of a real
strom broker (advertised as the proxy's address, so every connection goes through it) while
confluent-kafka (librdkafka), kafka-python and aiokafka run producers, group consumers,
transactions and admin operations on fixed names (:data:`TOPIC`, :data:`ADMIN_TOPIC`,
:data:`GROUP`, :data:`TXN_ID`); the broker's own WriteTxnMarkers to itself pass through the
proxy too (recorded under the client running at the time); :func:`hand_built` adds the few
versions only brokers (or only Java clients) send. Each
request frame is stored once per (client, api key, version, body) — at most
:data:`PER_VERSION` distinct bodies per client, API and version — as hex, header excluded.

File format: ``{"captures": [{"client", "api_key", "api_version", "body"}, ...]}``, sorted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from strom.protocol.frame import parse_request_header
from strom.testing import EmbeddedBroker

DATA_FILE = Path(__file__).with_name("data") / "client_requests.json"
TOPIC = "fuzz"
ADMIN_TOPIC = "fuzz-admin"
GROUP = "fuzz-group"
TXN_ID = "fuzz-txn"
PER_VERSION = 3


class RecordingProxy:
    """Forwards TCP connections to ``upstream`` and records every client → broker frame.

    One thread accepts; two threads per connection pump bytes. ``client`` names the client
    whose frames are being recorded; frames are appended to ``frames`` as
    ``(client, frame bytes)``.
    """

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.upstream: tuple[str, int] | None = None
        self.client = "unknown"
        self.frames: list[tuple[str, bytes]] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            assert self.upstream is not None
            upstream = socket.create_connection(self.upstream)
            threading.Thread(target=self._requests, args=(downstream, upstream),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, downstream), daemon=True).start()

    def _requests(self, source: socket.socket, sink: socket.socket) -> None:
        buffer = b""
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                sink.sendall(chunk)
                buffer += chunk
                while len(buffer) >= 4:
                    size = struct.unpack_from(">i", buffer)[0]
                    if len(buffer) < 4 + size:
                        break
                    with self._lock:
                        self.frames.append((self.client, buffer[4 : 4 + size]))
                    buffer = buffer[4 + size :]
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def _attempt(what: str, action: Callable[[], object]) -> None:
    """Run one client operation; its requests are what matters, not whether strom agrees."""
    try:
        action()
    except Exception as exc:
        print(f"  {what}: {type(exc).__name__}: {exc}"[:200])


def _confluent(bootstrap: str) -> None:
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
        OffsetSpec,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})

    def wait(futures: Any) -> None:
        for future in (futures.values() if isinstance(futures, dict) else [futures]):
            _attempt("future", lambda f=future: f.result(timeout=15))

    wait(admin.create_topics([NewTopic(TOPIC, 2, 1), NewTopic(
        ADMIN_TOPIC, 1, 1, config={"retention.ms": "3600000"})], operation_timeout=10))
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    for i in range(6):
        producer.produce(TOPIC, key=b"k%d" % i, value=b"value %d" % i, partition=i % 2,
                         headers=[("h", b"v")])
        producer.produce(ADMIN_TOPIC, value=b"admin %d" % i)
    producer.flush(15)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 6000})
    consumer.subscribe([TOPIC])
    seen = 0
    deadline = time.monotonic() + 20
    while seen < 6 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            seen += 1
    _attempt("commit", lambda: consumer.commit(asynchronous=False))
    _attempt("committed", lambda: consumer.committed([TopicPartition(TOPIC, 0)], timeout=10))
    _attempt("offsets", lambda: consumer.get_watermark_offsets(TopicPartition(TOPIC, 0),
                                                               timeout=10, cached=False))
    consumer.close()
    # A second member resumes from the committed offsets (they carry a leader epoch, which
    # librdkafka validates with OffsetForLeaderEpoch) and stays long enough to heartbeat.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                         "enable.auto.commit": False, "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 500})
    consumer.subscribe([TOPIC])
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        consumer.poll(0.2)
    consumer.close()
    # A position with a leader epoch is validated with OffsetForLeaderEpoch (KIP-320).
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, 2, leader_epoch=0)])
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        consumer.poll(0.2)
    # Transactions: one committed with offsets, one aborted.
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID,
                         "linger.ms": 5})

    def transactions() -> None:
        producer.init_transactions(15)
        producer.begin_transaction()
        producer.produce(TOPIC, value=b"txn", partition=0)
        producer.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 1)],
                                             consumer.consumer_group_metadata(), 15)
        producer.commit_transaction(15)
        producer.begin_transaction()
        producer.produce(TOPIC, value=b"aborted", partition=1)
        producer.abort_transaction(15)

    _attempt("transactions", transactions)
    consumer.close()
    wait(admin.create_partitions([NewPartitions(ADMIN_TOPIC, 2)], operation_timeout=10))
    resource = ConfigResource("topic", ADMIN_TOPIC)
    wait(admin.describe_configs([resource]))
    wait(admin.alter_configs([ConfigResource("topic", ADMIN_TOPIC,
                                             set_config={"retention.ms": "7200000"})]))
    wait(admin.incremental_alter_configs([ConfigResource("topic", ADMIN_TOPIC, incremental_configs=[
        ConfigEntry("cleanup.policy", "delete",
                    incremental_operation=AlterConfigOpType.SET)])]))
    wait(admin.describe_cluster(request_timeout=10))
    wait(admin.list_consumer_groups(request_timeout=10))
    wait(admin.describe_consumer_groups([GROUP], request_timeout=10))
    wait(admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP)]))
    wait(admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        GROUP, [TopicPartition(TOPIC, 0, 1)])]))
    wait(admin.list_offsets({TopicPartition(ADMIN_TOPIC, 0): OffsetSpec.latest(),
                             TopicPartition(ADMIN_TOPIC, 1): OffsetSpec.earliest()}))
    wait(admin.delete_records([TopicPartition(ADMIN_TOPIC, 0, 2)]))
    wait(admin.delete_consumer_groups([GROUP], request_timeout=10))
    wait(admin.delete_topics([ADMIN_TOPIC], operation_timeout=10))
    _confluent_acls(bootstrap)


def _confluent_acls(bootstrap: str) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    binding = AclBinding(ResourceType.TOPIC, TOPIC, ResourcePatternType.PREFIXED,
                         "User:fuzz", "*", AclOperation.READ, AclPermissionType.ALLOW)
    match = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    for name, call in (("create acls", lambda: admin.create_acls([binding])),
                       ("describe acls", lambda: admin.describe_acls(match)),
                       ("delete acls", lambda: admin.delete_acls([match]))):
        _attempt(name, lambda c=call: [f.result(timeout=15) for f in (
            lambda r: r.values() if isinstance(r, dict) else [r])(c())])


def _kafka_python(bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
    from kafka.admin import (
        ConfigResource,
        ConfigResourceType,
        KafkaAdminClient,
        NewPartitions,
        NewTopic,
    )

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    _attempt("create", lambda: admin.create_topics([NewTopic(ADMIN_TOPIC, 1, 1)]))
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True,
                             linger_ms=5)
    for i in range(6):
        producer.send(TOPIC, key=b"k%d" % i, value=b"value %d" % i, partition=i % 2,
                      headers=[("h", b"v")])
        producer.send(ADMIN_TOPIC, value=b"admin %d" % i)
    producer.flush(15)
    producer.close()
    consumer = KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id=GROUP,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=8000)
    for seen, _ in enumerate(consumer, 1):
        if seen >= 12:
            break
    _attempt("commit", consumer.commit)
    _attempt("end offsets", lambda: consumer.end_offsets([TopicPartition(TOPIC, 0)]))
    _attempt("offsets for times", lambda: consumer.offsets_for_times(
        {TopicPartition(TOPIC, 0): 0}))
    consumer.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{TXN_ID}-kp")

    def transactions() -> None:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(TOPIC, value=b"txn", partition=0)
        producer.send_offsets_to_transaction(
            {TopicPartition(TOPIC, 0): OffsetAndMetadata(1, "", -1)}, GROUP)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(TOPIC, value=b"aborted", partition=1)
        producer.abort_transaction()

    _attempt("transactions", transactions)
    producer.close()
    _attempt("describe producers", lambda: admin.describe_producers([TopicPartition(TOPIC, 0)]))
    _attempt("describe transactions", lambda: admin.describe_transactions([f"{TXN_ID}-kp"]))
    _attempt("list transactions", admin.list_transactions)
    resource = ConfigResource(ConfigResourceType.TOPIC, ADMIN_TOPIC,
                              configs={"retention.ms": "7200000"})
    _attempt("partitions", lambda: admin.create_partitions({ADMIN_TOPIC: NewPartitions(2)}))
    _attempt("describe configs", lambda: admin.describe_configs([
        ConfigResource(ConfigResourceType.TOPIC, ADMIN_TOPIC)], include_synonyms=True))
    _attempt("alter configs", lambda: admin.alter_configs([resource]))
    _attempt("alter configs (incremental)", lambda: admin.alter_configs([resource],
                                                                        incremental=True))
    _attempt("describe cluster", admin.describe_cluster)
    _attempt("list groups", admin.list_groups)
    _attempt("describe groups", lambda: admin.describe_groups([GROUP]))
    _attempt("list group offsets", lambda: admin.list_group_offsets({GROUP: None}))
    _attempt("alter group offsets", lambda: admin.alter_group_offsets(
        GROUP, {TopicPartition(TOPIC, 0): OffsetAndMetadata(1, "", -1)}))
    _attempt("delete group offsets", lambda: admin.delete_group_offsets(
        GROUP, [TopicPartition(TOPIC, 1)]))
    _attempt("log dirs", admin.describe_log_dirs)
    _attempt("delete records", lambda: admin.delete_records({TopicPartition(ADMIN_TOPIC, 0): 2}))
    _attempt("delete groups", lambda: admin.delete_groups([GROUP]))
    _attempt("delete topics", lambda: admin.delete_topics([ADMIN_TOPIC]))
    admin.close()
    _kafka_python_acls(bootstrap)


def _kafka_python_acls(bootstrap: str) -> None:
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
    )

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    acl = ACL("User:fuzz", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
              ResourcePattern(ResourceType.TOPIC, TOPIC, ACLResourcePatternType.LITERAL))
    match = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                      ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))
    _attempt("create acls", lambda: admin.create_acls([acl]))
    _attempt("describe acls", lambda: admin.describe_acls(match))
    _attempt("delete acls", lambda: admin.delete_acls([match]))
    admin.close()


def _aiokafka(bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
    from aiokafka.structs import TopicPartition

    async def run() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()

        async def attempt(what: str, operation: Any) -> None:
            try:
                await asyncio.wait_for(operation, 15)
            except Exception as exc:
                print(f"  {what}: {type(exc).__name__}: {exc}"[:200])

        await attempt("create", admin.create_topics([NewTopic(ADMIN_TOPIC, 1, 1)]))
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
        await producer.start()
        for i in range(6):
            await producer.send_and_wait(TOPIC, key=b"k%d" % i, value=b"value %d" % i,
                                         partition=i % 2, headers=[("h", b"v")])
        await producer.stop()
        consumer = AIOKafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id=GROUP,
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        await attempt("getmany", consumer.getmany(timeout_ms=5000, max_records=12))
        await attempt("commit", consumer.commit())
        await attempt("end offsets", consumer.end_offsets([TopicPartition(TOPIC, 0)]))
        await consumer.stop()
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap,
                                    transactional_id=f"{TXN_ID}-aio")
        await producer.start()

        async def transactions() -> None:
            async with producer.transaction():
                await producer.send_and_wait(TOPIC, value=b"txn", partition=0)
                await producer.send_offsets_to_transaction({TopicPartition(TOPIC, 0): 1}, GROUP)
            await producer.begin_transaction()
            await producer.send_and_wait(TOPIC, value=b"aborted", partition=1)
            await producer.abort_transaction()

        await attempt("transactions", transactions())
        await producer.stop()
        await attempt("partitions", admin.create_partitions({ADMIN_TOPIC: NewPartitions(2)}))
        await attempt("describe configs", admin.describe_configs([
            ConfigResource(ConfigResourceType.TOPIC, ADMIN_TOPIC)]))
        await attempt("alter configs", admin.alter_configs([ConfigResource(
            ConfigResourceType.TOPIC, ADMIN_TOPIC, configs={"retention.ms": "7200000"})]))
        await attempt("describe cluster", admin.describe_cluster())
        await attempt("list groups", admin.list_consumer_groups())
        await attempt("describe groups", admin.describe_consumer_groups([GROUP]))
        await attempt("group offsets", admin.list_consumer_group_offsets(GROUP))
        await attempt("delete records", admin.delete_records(
            {TopicPartition(ADMIN_TOPIC, 0): RecordsToDelete(2)}))
        await attempt("delete topics", admin.delete_topics([ADMIN_TOPIC]))
        await admin.close()

    asyncio.run(run())


def hand_built() -> list[dict[str, Any]]:
    """Seeds for versions only brokers send and no capture covers: AddPartitionsToTxn v4-5
    (KIP-890, a broker verifying a transactional write with the coordinator), and the SASL
    and SCRAM APIs the PLAINTEXT workloads never send, and the client-quota APIs (only
    Kafka's kafka-configs.sh sends them; none of the Python clients has them)."""
    from strom.protocol import api, controlled_shutdown
    from strom.protocol.versions import ApiKey

    verify = {"transactions": [{
        "transactional_id": TXN_ID, "producer_id": 1000, "producer_epoch": 0,
        "verify_only": True, "topics": [{"name": TOPIC, "partitions": [0, 1]}]}]}
    requests: list[tuple[int, int, dict[str, Any]]] = [
        (ApiKey.ADD_PARTITIONS_TO_TXN, version, verify) for version in (4, 5)]
    # SASL and SCRAM administration: the workloads run on a PLAINTEXT listener.
    requests += [(ApiKey.SASL_HANDSHAKE, v, {"mechanism": "PLAIN"}) for v in (0, 1)]
    requests += [(ApiKey.SASL_AUTHENTICATE, v, {"auth_bytes": b"\x00fuzz\x00pw"})
                 for v in (0, 1, 2)]
    requests.append((ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": [{"name": "fuzz"}]}))
    requests.append((ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {
        "deletions": [{"name": "gone", "mechanism": 1}],
        "upsertions": [{"name": "fuzz", "mechanism": 2, "iterations": 4096,
                        "salt": b"s" * 16, "salted_password": b"p" * 64}]}))
    for version in (0, 1):
        requests.append((ApiKey.DESCRIBE_CLIENT_QUOTAS, version, {
            "components": [{"entity_type": "user", "match_type": 0, "match": "fuzz"}],
            "strict": False}))
        requests.append((ApiKey.ALTER_CLIENT_QUOTAS, version, {"entries": [{
            "entity": [{"entity_type": "user", "entity_name": "fuzz"},
                       {"entity_type": "client-id", "entity_name": None}],
            "ops": [{"key": "producer_byte_rate", "value": 1e9, "remove": False}]}],
            "validate_only": True}))  # a stored quota could throttle the healthy clients
    # ElectLeaders: only admin tools send it (the Python clients' workloads do not).
    for version in (0, 1, 2):
        fields = {"topic_partitions": [{"topic": ADMIN_TOPIC, "partitions": [0]}],
                  "timeout_ms": 1000}
        if version >= 1:
            fields["election_type"] = 0
        requests.append((ApiKey.ELECT_LEADERS, version, fields))
    # DescribeTopicPartitions: only Java 4.x admin clients send it (a page, then the rest).
    requests.append((ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {
        "topics": [], "response_partition_limit": 2000, "cursor": None}))
    requests.append((ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {
        "topics": [{"name": ADMIN_TOPIC}, {"name": TOPIC}], "response_partition_limit": 1,
        "cursor": {"topic_name": TOPIC, "partition_index": 1}}))
    # ListConfigResources: only Kafka's kafka-configs (4.1+) sends it.
    requests.append((ApiKey.LIST_CONFIG_RESOURCES, 0, {}))
    requests.append((ApiKey.LIST_CONFIG_RESOURCES, 1, {"resource_types": [2, 4]}))
    built = [{"client": "hand-built", "api_key": int(key), "api_version": version,
              "body": api.request(key, version, fields).hex()}
             for key, version, fields in requests]
    # ControlledShutdown: only brokers send it, and kafka-python has no schema for it.
    built += [{"client": "hand-built", "api_key": int(ApiKey.CONTROLLED_SHUTDOWN),
               "api_version": version, "body": controlled_shutdown.encode_request(
                   controlled_shutdown.ControlledShutdownRequest(1, 7), version).hex()}
              for version in (1, 2, 3)]
    return built


WORKLOADS: dict[str, Callable[[str], None]] = {
    "confluent-kafka": _confluent,
    "kafka-python": _kafka_python,
    "aiokafka": _aiokafka,
}


@contextlib.contextmanager
def recording_broker() -> Iterator[tuple[EmbeddedBroker, RecordingProxy]]:
    proxy = RecordingProxy()
    config = {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}",
              "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 1}
    try:
        with EmbeddedBroker(config=config) as broker:
            proxy.upstream = (broker.host, broker.port)
            yield broker, proxy
    finally:
        proxy.close()


def capture() -> list[dict[str, Any]]:
    with recording_broker() as (_broker, proxy):
        bootstrap = f"127.0.0.1:{proxy.port}"
        for name, workload in WORKLOADS.items():
            print(f"{name}:")
            proxy.client = name
            workload(bootstrap)
            time.sleep(1)  # let closing connections flush their last requests
    kept: dict[tuple[str, int, int], list[str]] = {}
    for client, frame in proxy.frames:
        header, position = parse_request_header(memoryview(frame))
        bodies = kept.setdefault((client, header.api_key, header.api_version), [])
        body = frame[position:].hex()
        if body not in bodies and len(bodies) < PER_VERSION:
            bodies.append(body)
    return [
        {"client": client, "api_key": key, "api_version": version, "body": body}
        for (client, key, version), bodies in sorted(kept.items())
        for body in bodies
    ] + hand_built()


def _kafka_python_reassignments(bootstrap: str) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.structs import TopicPartition

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    tp = TopicPartition(TOPIC, 0)
    _attempt("alter reassignments", lambda: admin.alter_partition_reassignments({tp: [1]}))
    _attempt("cancel reassignments", lambda: admin.alter_partition_reassignments({tp: None}))
    _attempt("list reassignments", lambda: admin.list_partition_reassignments())
    _attempt("list reassignments", lambda: admin.list_partition_reassignments([tp]))
    admin.close()


#: Partial captures (``python -m tests.broker.capture_requests <name>``): the workloads and
#: the api keys whose seeds they replace in the file, without regenerating the others.
def _confluent_consumer_protocol(bootstrap: str) -> None:
    """librdkafka's KIP-848 consumer (``group.protocol=consumer``): joins, consumes, commits,
    is described by the admin client (ConsumerGroupDescribe) and leaves."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("fuzz-848", 2, 1)]).values():
        with contextlib.suppress(Exception):
            future.result(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fuzz-848-group",
                         "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    consumer.subscribe(["fuzz-848", "^fuzz-8.*"])
    deadline = time.monotonic() + 20
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.2)
    for _ in range(10):
        consumer.poll(0.2)
    admin.describe_consumer_groups(["fuzz-848-group"])["fuzz-848-group"].result(30)
    consumer.close()


PARTIAL: dict[str, tuple[tuple[tuple[str, Callable[[str], None]], ...], frozenset[int]]] = {
    "consumer-protocol": ((("confluent-kafka", _confluent_consumer_protocol),),
                          frozenset({68, 69})),
    "acls": ((("confluent-kafka", _confluent_acls), ("kafka-python", _kafka_python_acls)),
             frozenset({29, 30, 31})),
    "reassignments": ((("kafka-python", _kafka_python_reassignments),), frozenset({45, 46})),
}


def capture_only(name: str) -> list[dict[str, Any]]:
    """The requests of one :data:`PARTIAL` capture."""
    workloads, keys = PARTIAL[name]
    with recording_broker() as (_broker, proxy):
        bootstrap = f"127.0.0.1:{proxy.port}"
        for client, workload in workloads:
            proxy.client = client
            workload(bootstrap)
            time.sleep(1)
    out = []
    for client, frame in proxy.frames:
        header, position = parse_request_header(memoryview(frame))
        if header.api_key in keys:
            entry = {"client": client, "api_key": header.api_key,
                     "api_version": header.api_version, "body": frame[position:].hex()}
            if entry not in out:
                out.append(entry)
    return out


def main() -> None:
    import sys

    if len(sys.argv) == 2 and sys.argv[1] in PARTIAL:
        old = json.loads(DATA_FILE.read_text())["captures"]
        kept = [c for c in old if c["api_key"] not in PARTIAL[sys.argv[1]][1]]
        captures = kept + capture_only(sys.argv[1])
        DATA_FILE.write_text(json.dumps({"captures": captures}, indent=1) + "\n")
        print(f"{len(captures) - len(kept)} {sys.argv[1]} requests added -> {DATA_FILE}")
        return
    captures = capture()
    DATA_FILE.parent.mkdir(exist_ok=True)
    DATA_FILE.write_text(json.dumps({"captures": captures}, indent=1) + "\n")
    pairs = sorted({(c["api_key"], c["api_version"]) for c in captures})
    print(f"{len(captures)} requests, {len(pairs)} (api key, version) pairs -> {DATA_FILE}")


if __name__ == "__main__":
    main()
