"""strom's Python client: asyncio first, with blocking facades in :mod:`strom.client.sync`.

    from strom.client import AdminClient, Producer, Fetcher

    async with Producer("127.0.0.1:9092") as producer:
        metadata = await producer.send_and_wait("events", b"hello", key=b"k")

    async with Producer("127.0.0.1:9092", transactional_id="orders-1") as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await producer.send("events", b"all or nothing")
        await producer.commit_transaction()    # FatalTransactionError: close the producer;
                                               # AbortableTransactionError: abort_transaction()

    Fetcher("127.0.0.1:9092", isolation_level="read_committed")  # committed records only

Imports only :mod:`strom.common` and :mod:`strom.protocol` (DESIGN.md layers).
"""

from strom.client.admin import AdminClient
from strom.client.admin_types import (
    AbortTransactionSpec,
    AlterConfigOp,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    GroupDescription,
    GroupListing,
    GroupState,
    MemberDescription,
    NewTopic,
    OffsetAndMetadata,
    OffsetSpec,
    ProducerState,
    ResourceType,
    TransactionDescription,
    TransactionListing,
    TransactionState,
)
from strom.client.cluster import Cluster
from strom.client.conn import Connection
from strom.client.consumer import CommitFailedError, Consumer
from strom.client.consumer_protocol import ConsumerAssignment, ConsumerSubscription
from strom.client.fetcher import Fetcher
from strom.client.interceptors import ProducerInterceptor, ProducerRecord
from strom.client.producer import Producer
from strom.client.records import ConsumerRecord, RecordMetadata
from strom.client.serializers import SerializationError, Serializer
from strom.client.sync import SyncAdminClient, SyncFetcher, SyncProducer
from strom.client.transactions import ConsumerGroupMetadata
from strom.client.txn_errors import (
    AbortableTransactionError,
    FatalTransactionError,
    FencedProducerError,
    TransactionAbortedError,
    TransactionError,
    TransactionStateError,
)

__all__ = [
    "AbortTransactionSpec",
    "AbortableTransactionError",
    "AdminClient",
    "AlterConfigOp",
    "AlterConfigOpType",
    "Cluster",
    "CommitFailedError",
    "ConfigEntry",
    "ConfigResource",
    "Connection",
    "Consumer",
    "ConsumerAssignment",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "ConsumerSubscription",
    "FatalTransactionError",
    "FencedProducerError",
    "Fetcher",
    "GroupDescription",
    "GroupListing",
    "GroupState",
    "MemberDescription",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetSpec",
    "Producer",
    "ProducerInterceptor",
    "ProducerRecord",
    "ProducerState",
    "RecordMetadata",
    "ResourceType",
    "SerializationError",
    "Serializer",
    "SyncAdminClient",
    "SyncFetcher",
    "SyncProducer",
    "TransactionAbortedError",
    "TransactionDescription",
    "TransactionError",
    "TransactionListing",
    "TransactionState",
    "TransactionStateError",
]
