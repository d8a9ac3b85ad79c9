"""Describe/AlterUserScramCredentials with the real admin clients: credentials created,
listed, refused with Kafka's per-user errors, deleted; only salted keys reach the disk."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from strom.common.errors import error_class
from strom.protocol.versions import ApiKey
from tests.broker.raw import RawClient
from tests.broker.security.conftest import SecureBroker, create_scram_user


def _admin(secure: SecureBroker):  # type: ignore[no-untyped-def]
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": secure.bootstrap("PLAINTEXT")})


def test_create_describe_login_delete(secure: SecureBroker) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ScramMechanism, UserScramCredentialDeletion

    user, password = f"u-{uuid.uuid4().hex[:8]}", "s3cret-passw0rd"
    create_scram_user(secure.bootstrap("PLAINTEXT"), user, password)
    admin = _admin(secure)
    described = admin.describe_user_scram_credentials([user])[user].result(10)
    assert sorted((i.mechanism, i.iterations) for i in described.scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 4096)]
    # The metadata file holds derived keys only: never the password or the salted password.
    text = (Path(secure.broker.data_dir) / "strom-metadata.json").read_text()
    assert user in text and password not in text and "stored_key=" in text
    # The new user can log in at once (credentials are read from the current image).
    from tests.broker.security.test_clients import confluent_conf

    conf = confluent_conf(secure, "SASL_PLAINTEXT", "SCRAM-SHA-512", user=user)
    conf["sasl.password"] = password
    from confluent_kafka.admin import AdminClient

    assert AdminClient(conf).list_topics(timeout=10).brokers
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256),
        UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)])
    for future in futures.values():
        future.result(10)
    with pytest.raises(KafkaException, match="nonexistent user"):
        admin.describe_user_scram_credentials([user])[user].result(10)


def test_kafka_errors_per_user(secure: SecureBroker) -> None:
    client = RawClient(secure.bootstrap("PLAINTEXT"))
    upsert = {"name": "carol", "mechanism": 1, "iterations": 100, "salt": b"salt",
              "salted_password": b"x" * 32}
    response = client.call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {
        "deletions": [{"name": "nobody", "mechanism": 1}, {"name": "dave", "mechanism": 1}],
        "upsertions": [upsert, {**upsert, "name": "dave", "iterations": 8192},
                       {**upsert, "name": "erin", "mechanism": 9, "iterations": 8192},
                       {**upsert, "name": "", "iterations": 8192}]})
    results = {r.user: (r.error_code, r.error_message) for r in response.results}
    assert results == {
        "nobody": (error_class("RESOURCE_NOT_FOUND").code,
                   "Attempt to delete a user credential that does not exist"),
        "dave": (error_class("DUPLICATE_RESOURCE").code,
                 "A user credential cannot be altered twice in the same request"),
        "carol": (error_class("UNACCEPTABLE_CREDENTIAL").code, "Too few iterations"),
        "erin": (error_class("UNSUPPORTED_SASL_MECHANISM").code, "Unknown SCRAM mechanism"),
        "": (error_class("UNACCEPTABLE_CREDENTIAL").code, "Username must not be empty"),
    }
    described = client.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
                            {"users": [{"name": "carol"}, {"name": "x"}, {"name": "x"}]})
    assert [(r.user, r.error_code) for r in described.results] == [
        ("carol", error_class("RESOURCE_NOT_FOUND").code),
        ("x", error_class("DUPLICATE_RESOURCE").code)]
    client.close()


def test_kafka_python_admin_describes_users(secure: SecureBroker) -> None:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=secure.bootstrap("PLAINTEXT"))
    try:
        response = admin.describe_user_scram_credentials()
    finally:
        admin.close()
    text = str(response)
    assert "bob" in text
