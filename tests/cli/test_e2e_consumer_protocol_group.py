"""``strom groups`` on a KIP-848 group (``group.protocol=consumer``) of librdkafka members:
DescribeGroups shows it as Kafka's ``asDescribedGroup`` does (protocol type ``consumer``, the
assignor as the protocol, members with their assignments), and it is listed."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer

from strom.testing import EmbeddedBroker
from tests.broker.raw import RawClient
from tests.broker.test_data_path import create
from tests.cli.conftest import Result


def test_describe_and_list_a_consumer_protocol_group(cli: Callable[..., Result]) -> None:
    config = {"offsets.topic.num.partitions": 3, "group.consumer.heartbeat.interval.ms": 300}
    with EmbeddedBroker(config=config) as broker:
        raw = RawClient(broker.bootstrap)
        create(raw, "orders", 2)
        raw.close()
        member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g848",
                           "group.protocol": "consumer", "client.id": "c848"})
        member.subscribe(["orders"])
        deadline = time.monotonic() + 30
        while len(member.assignment()) < 2 and time.monotonic() < deadline:
            member.poll(0.2)
        b = ["--bootstrap-server", broker.bootstrap]
        listed = cli("groups", "list", "--state", *b)
        assert listed.out.splitlines()[1].split() == ["g848", "Stable"]
        typed = cli("groups", "list", "--type", "--state", *b)  # as kafka-consumer-groups
        assert typed.out.splitlines() == ["GROUP  TYPE      STATE", "g848   Consumer  Stable"]
        assert cli("groups", "list", "--type", "classic", *b).out.splitlines() == [
            "GROUP  TYPE"]
        bad = cli("groups", "list", "--type", "bogus", *b)
        assert bad.code == 1 and "unknown group type 'bogus'" in bad.err
        described = cli("groups", "describe", "g848", "--members", *b)
        assert described.code == 0, described.err
        lines = described.out.splitlines()
        assert lines[0].startswith("Group: g848  State: Stable  Protocol: consumer (uniform)")
        assert lines[0].endswith("Members: 1")
        row = lines[-1].split()
        assert (row[2], row[3], row[4]) == ("c848", "2", "orders(0,1)")
        member.close()
