"""``strom consume --group`` and client properties of consume / produce against a real broker.

``--group`` starts from the group's committed offsets and commits the offset after the last
record printed (see strom.cli.consume_group); these tests read the commits back through
OffsetFetch, drive it as a separate process for SIGTERM, and put a confluent-kafka member in
the group to check that an active group is refused.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from strom.client.sync import SyncAdminClient
from strom.common.types import TopicPartition
from tests.cli.conftest import Result
from tests.client.groups_e2e import (
    GroupMember,
    bootstrap_of,
    make_topic,
    produce,
    requires_group_apis,
    skip_unless_served,
    unique,
    wait_for,
)

pytestmark = requires_group_apis
TP = TopicPartition


@pytest.fixture
def bootstrap(strom_broker: Any) -> str:
    address = bootstrap_of(strom_broker)
    skip_unless_served(address)
    return address


def committed(bootstrap: str, group_id: str) -> dict[TopicPartition, int]:
    with SyncAdminClient(bootstrap) as admin:
        return {tp: o.offset for tp, o in admin.list_consumer_group_offsets(group_id).items()}


def printed(out: str) -> list[tuple[int, int]]:
    """(partition, offset) of lines printed with --print-partition --print-offset."""
    rows = []
    for line in out.splitlines():
        partition, offset, _value = line.split("\t")
        rows.append((int(partition.removeprefix("Partition:")),
                     int(offset.removeprefix("Offset:"))))
    return rows


def test_group_resumes_where_it_stopped(cli: Callable[..., Result], bootstrap: str) -> None:
    b = ["--bootstrap-server", bootstrap]
    topic = make_topic(bootstrap, {0: 4, 1: 2})
    group = unique("console")
    where = ["--print-partition", "--print-offset"]

    first = cli("consume", topic, "--group", group, "--from-beginning", "--max-messages", "3",
                *where, *b)
    assert first.code == 0, first.err
    seen = printed(first.out)
    assert len(seen) == 3
    # The offset after the last record printed, per partition; 0 where none was printed
    # (the start position), never the position of records fetched but not printed.
    assert committed(bootstrap, group) == {
        TP(topic, p): sum(1 for q, _ in seen if q == p) for p in (0, 1)}

    rest = cli("consume", topic, "--group", group, "--from-beginning", "--timeout-ms", "800",
               *where, *b)
    assert rest.code == 0, rest.err
    assert sorted(seen + printed(rest.out)) == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]
    assert committed(bootstrap, group) == {TP(topic, 0): 4, TP(topic, 1): 2}
    described = cli("groups", "describe", group, *b)
    assert described.code == 0, described.err
    assert [line.split()[3:6] for line in described.out.splitlines()
            if line.startswith(group)] == [["4", "4", "0"], ["2", "2", "0"]]

    produce(bootstrap, topic, {1: 2})
    new = cli("consume", topic, "--group", group, "--max-messages", "2", *where, *b)
    assert printed(new.out) == [(1, 2), (1, 3)]
    assert committed(bootstrap, group) == {TP(topic, 0): 4, TP(topic, 1): 4}


def test_new_group_starts_at_the_end_and_commits_it(cli: Callable[..., Result],
                                                   bootstrap: str) -> None:
    b = ["--bootstrap-server", bootstrap]
    topic = make_topic(bootstrap, {0: 3})
    group = unique("console")
    idle = cli("consume", topic, "--group", group, "--timeout-ms", "300", *b)
    assert idle.code == 0 and idle.out == ""
    # As Kafka's console consumer: the position (the end) is committed on exit, so records
    # produced while no consumer runs are not skipped by the next run.
    assert committed(bootstrap, group) == {TP(topic, 0): 3}
    produce(bootstrap, topic, {0: 1})
    assert cli("consume", topic, "--group", group, "--max-messages", "1", *b).out == "v0\n"


def test_auto_commit_off_and_reset_none(cli: Callable[..., Result], bootstrap: str) -> None:
    b = ["--bootstrap-server", bootstrap]
    topic = make_topic(bootstrap, {0: 3})
    group = unique("console")
    none = cli("consume", topic, "--group", group, "--consumer-property",
               "auto.offset.reset=none", *b)
    assert none.code == 1 and none.err.count("\n") == 1
    assert f"group {group!r} has no committed offset for {topic}-0" in none.err

    off = ["--consumer-property", "enable.auto.commit=false"]
    read = cli("consume", topic, "--group", group, "--from-beginning", "--max-messages", "2",
               *off, *b)
    assert read.out == "v0\nv1\n"
    assert committed(bootstrap, group) == {}
    with SyncAdminClient(bootstrap) as admin:
        admin.alter_consumer_group_offsets(group, {TP(topic, 0): 1})
    again = cli("consume", topic, "--group", group, "--max-messages", "2", *off, *b)
    assert again.out == "v1\nv2\n"
    assert committed(bootstrap, group) == {TP(topic, 0): 1}


def test_active_group_is_refused(cli: Callable[..., Result], bootstrap: str) -> None:
    b = ["--bootstrap-server", bootstrap]
    topic = make_topic(bootstrap, {0: 2})
    group = unique("console")
    member = GroupMember(bootstrap, group, topic)
    try:
        member.consume(2)
        member.commit()
        refused = cli("consume", topic, "--group", group, *b)
        assert refused.code == 1 and refused.err.count("\n") == 1
        assert f"group {group!r} has active members" in refused.err
        # Reading the group's offsets without committing is fine.
        produce(bootstrap, topic, {0: 1})
        peek = cli("consume", topic, "--group", group, "--max-messages", "1",
                   "--consumer-property", "enable.auto.commit=false", *b)
        assert peek.code == 0 and peek.out == "v0\n"
        assert committed(bootstrap, group) == {TP(topic, 0): 2}
    finally:
        member.close()


def test_interval_commits_and_sigterm(bootstrap: str, tmp_path: Path) -> None:
    topic = make_topic(bootstrap, {0: 2})
    group = unique("console")
    config = tmp_path / "consumer.properties"
    config.write_text(f"bootstrap.servers={bootstrap}\nauto.commit.interval.ms=200\n"
                      "client.id=console-test\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "strom", "consume", topic, "--group", group,
         "--from-beginning", "--command-config", str(config)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        wait_for(lambda: committed(bootstrap, group) == {TP(topic, 0): 2},
                 "the first interval commit")
        produce(bootstrap, topic, {0: 3})
        wait_for(lambda: committed(bootstrap, group) == {TP(topic, 0): 5},
                 "a later interval commit")
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert out.splitlines() == ["v0", "v1", "v0", "v1", "v2"]
    assert err.strip().endswith("Processed a total of 5 messages")
    assert committed(bootstrap, group) == {TP(topic, 0): 5}


def test_client_properties_reach_the_clients(cli: Callable[..., Result], strom_broker: Any,
                                             tmp_path: Path) -> None:
    bootstrap = bootstrap_of(strom_broker)
    b = ["--bootstrap-server", bootstrap]
    topic = make_topic(bootstrap, {0: 0})
    config = tmp_path / "producer.properties"
    config.write_text("enable.idempotence=true\ncompression.type=lz4\n")
    sent = cli("produce", topic, "--command-config", str(config),
               "--producer-property", "compression.type=gzip", *b, stdin="a\nb\n")
    assert sent.code == 0, sent.err
    # Without --from-beginning: auto.offset.reset=earliest decides where to start.
    got = cli("consume", topic, "--max-messages", "2", "--consumer-property",
              "auto.offset.reset=earliest", *b)
    assert got.out == "a\nb\n"
    data_dir = getattr(strom_broker, "data_dir", None)
    if data_dir is None:
        return
    dumped = cli("dump-log", str(Path(data_dir) / f"{topic}-0"))
    assert "compresscodec: gzip" in dumped.out  # the property overrode the file
    assert "producerId: -1" not in dumped.out and "baseSequence: 0" in dumped.out
