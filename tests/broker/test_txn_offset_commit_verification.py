"""KIP-890 part 1 for TxnOffsetCommit, on a real broker over the wire: the group coordinator
writes a producer's transactional offsets only once the transaction coordinator confirms that
the group's ``__consumer_offsets`` partition is in the producer's ongoing transaction (added by
AddOffsetsToTxn) at that epoch, as Kafka 4.4's group coordinator does. Without it a
TxnOffsetCommit arriving after its transaction was aborted (a zombie, or a retry) was written
and answered NONE: its offsets stayed pending — OffsetFetch with require_stable answered
UNSTABLE_OFFSET_COMMIT — until some later marker of the producer committed or aborted them.

Kafka 4.4 (one KRaft node, 2026-12-06) answers these same raw requests with the same codes:
no AddOffsetsToTxn INVALID_TXN_STATE (v3) / TRANSACTION_ABORTABLE (v4), an unknown producer
INVALID_PRODUCER_ID_MAPPING, after the abort INVALID_TXN_STATE (v3) / TRANSACTION_ABORTABLE
(v4), an older epoch INVALID_PRODUCER_EPOCH (v3 and v4), and require_stable fetches as
below."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from strom.common.errors import ErrorCode
from strom.protocol.versions import ApiKey
from strom.testing import EmbeddedBroker
from tests.broker.raw import RawClient
from tests.broker.test_txn_verification import init
from tests.compat.helpers import create_topic

E: Any = ErrorCode
TOPIC = "consumed"


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(config={"transaction.state.log.num.partitions": 2,
                                "offsets.topic.num.partitions": 2}) as b:
        create_topic(b.bootstrap, TOPIC, 1)
        yield b


def group_coordinator(client: RawClient, group: str) -> None:
    for _ in range(100):  # the first lookup creates __consumer_offsets; its shard loads
        found = client.call(ApiKey.FIND_COORDINATOR, 2, {"key": group, "key_type": 0})
        if found.error_code == 0:
            fetched = client.call(ApiKey.OFFSET_FETCH, 7, {
                "group_id": group, "topics": None, "require_stable": True})
            if fetched.error_code == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"no coordinator for {group}")


def txn_commit(client: RawClient, tid: str, producer: tuple[int, int], group: str,
               offset: int, version: int = 3) -> int:
    resp = client.call(ApiKey.TXN_OFFSET_COMMIT, version, {
        "transactional_id": tid, "group_id": group, "producer_id": producer[0],
        "producer_epoch": producer[1], "generation_id": -1, "member_id": "",
        "group_instance_id": None,
        "topics": [{"name": TOPIC, "partitions": [{
            "partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
            "committed_metadata": ""}]}]})
    return int(resp.topics[0].partitions[0].error_code)


def add_offsets(client: RawClient, tid: str, producer: tuple[int, int], group: str) -> int:
    return int(client.call(ApiKey.ADD_OFFSETS_TO_TXN, 3, {
        "transactional_id": tid, "producer_id": producer[0], "producer_epoch": producer[1],
        "group_id": group}).error_code)


def end_txn(client: RawClient, tid: str, producer: tuple[int, int], commit: bool) -> int:
    return int(client.call(ApiKey.END_TXN, 3, {
        "transactional_id": tid, "producer_id": producer[0], "producer_epoch": producer[1],
        "committed": commit}).error_code)


def stable_offset(client: RawClient, group: str) -> tuple[int, int]:
    """(offset, error) of the group's partition for a require_stable OffsetFetch."""
    resp = client.call(ApiKey.OFFSET_FETCH, 7, {
        "group_id": group, "topics": [{"name": TOPIC, "partition_indexes": [0]}],
        "require_stable": True})
    part = resp.topics[0].partitions[0]
    return int(part.committed_offset), int(part.error_code)


def test_offsets_of_a_transaction_without_the_groups_partition_are_not_written(
        broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap)
    group_coordinator(client, "g1")
    producer = init(client, "offsets-tx")
    # no AddOffsetsToTxn: the group's partition is not in the (empty) transaction
    assert txn_commit(client, "offsets-tx", producer, "g1", 5, version=3) == E.INVALID_TXN_STATE
    assert txn_commit(client, "offsets-tx", producer, "g1", 5,
                      version=4) == E.TRANSACTION_ABORTABLE
    assert stable_offset(client, "g1") == (-1, 0)  # nothing pending: nothing was written
    # a transactional id / producer id the coordinator does not know
    assert txn_commit(client, "nobody", (producer[0] + 1000, 0), "g1",
                      5) == E.INVALID_PRODUCER_ID_MAPPING
    # in the transaction: written, pending until the transaction ends
    assert add_offsets(client, "offsets-tx", producer, "g1") == 0
    assert txn_commit(client, "offsets-tx", producer, "g1", 5) == 0
    assert stable_offset(client, "g1") == (-1, E.UNSTABLE_OFFSET_COMMIT)
    assert end_txn(client, "offsets-tx", producer, commit=True) == 0
    for _ in range(100):
        if stable_offset(client, "g1") == (5, 0):
            break
        time.sleep(0.1)
    assert stable_offset(client, "g1") == (5, 0)
    client.close()


def test_a_commit_after_its_transaction_was_aborted_is_refused(broker: EmbeddedBroker) -> None:
    """The zombie/retry case: the transaction is aborted (its marker is on the group's
    partition); a TxnOffsetCommit of it arriving now is refused, not left pending."""
    client = RawClient(broker.bootstrap)
    group_coordinator(client, "g2")
    producer = init(client, "late-tx")
    assert add_offsets(client, "late-tx", producer, "g2") == 0
    assert txn_commit(client, "late-tx", producer, "g2", 3) == 0
    assert end_txn(client, "late-tx", producer, commit=False) == 0
    for _ in range(100):
        if stable_offset(client, "g2") == (-1, 0):
            break
        time.sleep(0.1)
    assert stable_offset(client, "g2") == (-1, 0)
    assert txn_commit(client, "late-tx", producer, "g2", 9) == E.INVALID_TXN_STATE
    assert txn_commit(client, "late-tx", producer, "g2", 9,
                      version=4) == E.TRANSACTION_ABORTABLE
    assert stable_offset(client, "g2") == (-1, 0)  # not pending: nothing was written
    # a fenced producer (its epoch was bumped by another InitProducerId)
    bumped = init(client, "late-tx")
    assert bumped == (producer[0], producer[1] + 1)
    for version in (3, 4):
        assert txn_commit(client, "late-tx", producer, "g2", 9,
                          version=version) == E.INVALID_PRODUCER_EPOCH
    assert stable_offset(client, "g2") == (-1, 0)
    client.close()
