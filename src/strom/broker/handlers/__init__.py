"""One module per Kafka API; :func:`build_handlers` maps api keys to handler instances."""

from __future__ import annotations

from strom.broker.dispatch import Handler
from strom.broker.handlers.add_offsets_to_txn import AddOffsetsToTxnHandler
from strom.broker.handlers.add_partitions_to_txn import AddPartitionsToTxnHandler
from strom.broker.handlers.alter_client_quotas import AlterClientQuotasHandler
from strom.broker.handlers.alter_configs import AlterConfigsHandler, IncrementalAlterConfigsHandler
from strom.broker.handlers.alter_partition_reassignments import (
    AlterPartitionReassignmentsHandler,
)
from strom.broker.handlers.alter_user_scram_credentials import AlterUserScramCredentialsHandler
from strom.broker.handlers.api_versions import ApiVersionsHandler
from strom.broker.handlers.consumer_group_describe import ConsumerGroupDescribeHandler
from strom.broker.handlers.consumer_group_heartbeat import ConsumerGroupHeartbeatHandler
from strom.broker.handlers.controlled_shutdown import ControlledShutdownHandler
from strom.broker.handlers.create_acls import CreateAclsHandler
from strom.broker.handlers.create_partitions import CreatePartitionsHandler
from strom.broker.handlers.create_topics import CreateTopicsHandler
from strom.broker.handlers.delete_acls import DeleteAclsHandler
from strom.broker.handlers.delete_groups import DeleteGroupsHandler
from strom.broker.handlers.delete_records import DeleteRecordsHandler
from strom.broker.handlers.delete_topics import DeleteTopicsHandler
from strom.broker.handlers.describe_acls import DescribeAclsHandler
from strom.broker.handlers.describe_client_quotas import DescribeClientQuotasHandler
from strom.broker.handlers.describe_cluster import DescribeClusterHandler
from strom.broker.handlers.describe_configs import DescribeConfigsHandler
from strom.broker.handlers.describe_groups import DescribeGroupsHandler
from strom.broker.handlers.describe_log_dirs import DescribeLogDirsHandler
from strom.broker.handlers.describe_producers import DescribeProducersHandler
from strom.broker.handlers.describe_topic_partitions import DescribeTopicPartitionsHandler
from strom.broker.handlers.describe_transactions import DescribeTransactionsHandler
from strom.broker.handlers.describe_user_scram_credentials import (
    DescribeUserScramCredentialsHandler,
)
from strom.broker.handlers.elect_leaders import ElectLeadersHandler
from strom.broker.handlers.end_txn import EndTxnHandler
from strom.broker.handlers.fetch import FetchHandler
from strom.broker.handlers.find_coordinator import FindCoordinatorHandler
from strom.broker.handlers.heartbeat import HeartbeatHandler
from strom.broker.handlers.init_producer_id import InitProducerIdHandler
from strom.broker.handlers.join_group import JoinGroupHandler
from strom.broker.handlers.leave_group import LeaveGroupHandler
from strom.broker.handlers.list_config_resources import ListConfigResourcesHandler
from strom.broker.handlers.list_groups import ListGroupsHandler
from strom.broker.handlers.list_offsets import ListOffsetsHandler
from strom.broker.handlers.list_partition_reassignments import (
    ListPartitionReassignmentsHandler,
)
from strom.broker.handlers.list_transactions import ListTransactionsHandler
from strom.broker.handlers.metadata import MetadataHandler
from strom.broker.handlers.offset_commit import OffsetCommitHandler
from strom.broker.handlers.offset_delete import OffsetDeleteHandler
from strom.broker.handlers.offset_fetch import OffsetFetchHandler
from strom.broker.handlers.offset_for_leader_epoch import OffsetForLeaderEpochHandler
from strom.broker.handlers.produce import ProduceHandler
from strom.broker.handlers.sasl_authenticate import SaslAuthenticateHandler
from strom.broker.handlers.sasl_handshake import SaslHandshakeHandler
from strom.broker.handlers.sync_group import SyncGroupHandler
from strom.broker.handlers.txn_offset_commit import TxnOffsetCommitHandler
from strom.broker.handlers.write_txn_markers import WriteTxnMarkersHandler
from strom.broker.state import BrokerState
from strom.protocol.versions import ApiKey


def build_handlers(state: BrokerState) -> dict[int, Handler]:
    return {
        ApiKey.PRODUCE: ProduceHandler(state),
        ApiKey.FETCH: FetchHandler(state),
        ApiKey.LIST_OFFSETS: ListOffsetsHandler(state),
        ApiKey.METADATA: MetadataHandler(state),
        ApiKey.CONTROLLED_SHUTDOWN: ControlledShutdownHandler(state),
        ApiKey.ELECT_LEADERS: ElectLeadersHandler(state),
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: AlterPartitionReassignmentsHandler(state),
        ApiKey.LIST_PARTITION_REASSIGNMENTS: ListPartitionReassignmentsHandler(state),
        ApiKey.API_VERSIONS: ApiVersionsHandler(state),
        ApiKey.CREATE_TOPICS: CreateTopicsHandler(state),
        ApiKey.DELETE_TOPICS: DeleteTopicsHandler(state),
        ApiKey.DELETE_RECORDS: DeleteRecordsHandler(state),
        ApiKey.INIT_PRODUCER_ID: InitProducerIdHandler(state),
        ApiKey.OFFSET_FOR_LEADER_EPOCH: OffsetForLeaderEpochHandler(state),
        ApiKey.DESCRIBE_CONFIGS: DescribeConfigsHandler(state),
        ApiKey.ALTER_CONFIGS: AlterConfigsHandler(state),
        ApiKey.DESCRIBE_LOG_DIRS: DescribeLogDirsHandler(state),
        ApiKey.CREATE_PARTITIONS: CreatePartitionsHandler(state),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: IncrementalAlterConfigsHandler(state),
        ApiKey.DESCRIBE_CLUSTER: DescribeClusterHandler(state),
        ApiKey.OFFSET_COMMIT: OffsetCommitHandler(state),
        ApiKey.OFFSET_FETCH: OffsetFetchHandler(state),
        ApiKey.FIND_COORDINATOR: FindCoordinatorHandler(state),
        ApiKey.JOIN_GROUP: JoinGroupHandler(state),
        ApiKey.HEARTBEAT: HeartbeatHandler(state),
        ApiKey.CONSUMER_GROUP_HEARTBEAT: ConsumerGroupHeartbeatHandler(state),
        ApiKey.CONSUMER_GROUP_DESCRIBE: ConsumerGroupDescribeHandler(state),
        ApiKey.LIST_CONFIG_RESOURCES: ListConfigResourcesHandler(state),
        ApiKey.LEAVE_GROUP: LeaveGroupHandler(state),
        ApiKey.SYNC_GROUP: SyncGroupHandler(state),
        ApiKey.DESCRIBE_GROUPS: DescribeGroupsHandler(state),
        ApiKey.LIST_GROUPS: ListGroupsHandler(state),
        ApiKey.DELETE_GROUPS: DeleteGroupsHandler(state),
        ApiKey.OFFSET_DELETE: OffsetDeleteHandler(state),
        ApiKey.DESCRIBE_CLIENT_QUOTAS: DescribeClientQuotasHandler(state),
        ApiKey.ALTER_CLIENT_QUOTAS: AlterClientQuotasHandler(state),
        ApiKey.ADD_PARTITIONS_TO_TXN: AddPartitionsToTxnHandler(state),
        ApiKey.END_TXN: EndTxnHandler(state),
        ApiKey.ADD_OFFSETS_TO_TXN: AddOffsetsToTxnHandler(state),
        ApiKey.TXN_OFFSET_COMMIT: TxnOffsetCommitHandler(state),
        ApiKey.DESCRIBE_PRODUCERS: DescribeProducersHandler(state),
        ApiKey.DESCRIBE_TRANSACTIONS: DescribeTransactionsHandler(state),
        ApiKey.LIST_TRANSACTIONS: ListTransactionsHandler(state),
        ApiKey.DESCRIBE_TOPIC_PARTITIONS: DescribeTopicPartitionsHandler(state),
        ApiKey.WRITE_TXN_MARKERS: WriteTxnMarkersHandler(state),
        ApiKey.SASL_HANDSHAKE: SaslHandshakeHandler(state),
        ApiKey.SASL_AUTHENTICATE: SaslAuthenticateHandler(state),
        ApiKey.DESCRIBE_ACLS: DescribeAclsHandler(state),
        ApiKey.CREATE_ACLS: CreateAclsHandler(state),
        ApiKey.DELETE_ACLS: DeleteAclsHandler(state),
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: DescribeUserScramCredentialsHandler(state),
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: AlterUserScramCredentialsHandler(state),
    }
