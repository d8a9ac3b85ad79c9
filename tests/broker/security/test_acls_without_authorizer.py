"""ACL APIs on a broker without an authorizer (the session broker): CreateAcls, DescribeAcls
and DeleteAcls answer SECURITY_DISABLED with Kafka's messages and nothing is stored — ACLs
listed but never enforced would make an operator believe the cluster is locked down. The
answers were compared with Apache Kafka 4.4's on the wire (the same codes and messages)."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kafka.admin import (
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KpResourceType
from kafka.errors import SecurityDisabledError

from strom.metadata.local import FILE_NAME
from strom.protocol.versions import ApiKey
from strom.testing import EmbeddedBroker
from tests.broker.raw import RawClient

SECURITY_DISABLED = 54
ANY_FILTER = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
              "principal_filter": None, "host_filter": None, "operation": 1,
              "permission_type": 1}


def test_acl_apis_answer_security_disabled_with_kafkas_messages(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap)
    try:
        for version in (1, 2, 3):
            created = client.call(ApiKey.CREATE_ACLS, version, {"creations": [
                {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3,
                 "principal": "User:a", "host": "*", "operation": 3, "permission_type": 3}]})
            assert [(r.error_code, r.error_message) for r in created.results] == [
                (SECURITY_DISABLED, "No Authorizer is configured.")]
            described = client.call(ApiKey.DESCRIBE_ACLS, version, ANY_FILTER)
            assert (described.error_code, described.error_message, described.resources) == (
                SECURITY_DISABLED, "No Authorizer is configured on the broker", [])
            deleted = client.call(ApiKey.DELETE_ACLS, version, {"filters": [ANY_FILTER] * 2})
            assert [(r.error_code, r.error_message, r.matching_acls)
                    for r in deleted.filter_results] == [
                (SECURITY_DISABLED, "No Authorizer is configured.", [])] * 2
    finally:
        client.close()


def test_real_admin_clients_are_refused_and_nothing_is_stored(broker: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    binding = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL,
                         "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    for future in admin.create_acls([binding]).values():
        with pytest.raises(KafkaException) as created:
            future.result(timeout=15)
        assert created.value.args[0].code() == SECURITY_DISABLED
        assert created.value.args[0].str() == "No Authorizer is configured."
    match = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    for future in admin.delete_acls([match]).values():
        with pytest.raises(KafkaException) as deleted:
            future.result(timeout=15)
        assert deleted.value.args[0].code() == SECURITY_DISABLED
    kafka_python = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        with pytest.raises(SecurityDisabledError):
            kafka_python.describe_acls(ACLFilter(
                None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY)))
    finally:
        kafka_python.close()
    stored = json.loads((broker.data_dir / FILE_NAME).read_text())
    assert not stored.get("acls")
