"""Controller election through a real ZooKeeper: one controller at a time, a new epoch per
election, re-election when the controller's session dies, and fencing of an old controller
that wakes up (a paused process) and writes with its old epoch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import strom
from strom.controller.election import ControllerElection
from strom.metadata.changes import PutTopic
from strom.metadata.image import BrokerInfo, PartitionInfo, TopicInfo
from strom.metadata.zookeeper import NotControllerError, ZooKeeperMetadataStore
from strom.testing.zookeeper import ZooKeeperServer, expire_session
from tests.metadata.zk_helpers import wait_until


class Candidate:
    """A broker's store and candidacy, with what its callbacks saw."""

    def __init__(self, connect: str, broker_id: int) -> None:
        self.store = ZooKeeperMetadataStore(connect, timeout=5.0, session_timeout=1.0)
        self.events: list[str] = []
        self.election = ControllerElection(
            self.store, broker_id, on_elected=lambda epoch: self.events.append(f"elected {epoch}"),
            on_resigned=lambda: self.events.append("resigned"))


@pytest.fixture
def candidates(zookeeper_connect: str) -> Iterator[Callable[[int], Candidate]]:
    made: list[Candidate] = []

    def make(broker_id: int) -> Candidate:
        candidate = Candidate(zookeeper_connect, broker_id)
        made.append(candidate)
        return candidate

    yield make
    for candidate in made:
        candidate.store.close()


def new_topic(name: str) -> PutTopic:
    return PutTopic(TopicInfo(name, uuid.uuid4(), (PartitionInfo(0, 1, 0, (1,), (1,)),), {}))


def test_one_controller_and_its_epoch(candidates: Callable[[int], Candidate]) -> None:
    a, b = candidates(1), candidates(2)
    a.election.start()
    b.election.start()
    assert a.election.is_controller and not b.election.is_controller
    assert a.events == ["elected 1"] and b.events == []
    wait_until(lambda: b.store.image.controller_id == 1 == a.store.image.controller_id)
    assert json.loads(a.store.session.get("/controller")[0])["brokerid"] == 1
    assert a.store.session.get("/controller_epoch")[0] == b"1"
    image = a.election.write(a.store.image.epoch, [new_topic("by-controller")])
    assert "by-controller" in image.topics
    with pytest.raises(NotControllerError, match="broker 2 is not the controller"):
        b.election.write(b.store.image.epoch, [new_topic("by-other")])


def test_resigning_hands_over_with_a_new_epoch(candidates: Callable[[int], Candidate]) -> None:
    a, b = candidates(1), candidates(2)
    a.election.start()
    b.election.start()
    a.election.resign()
    wait_until(lambda: b.election.is_controller, what="b takes over")
    assert a.events == ["elected 1", "resigned"] and b.events == ["elected 2"]
    wait_until(lambda: a.store.image.controller_id == 2)


def test_expired_controller_is_replaced_and_fenced(
        candidates: Callable[[int], Candidate], zookeeper_server: ZooKeeperServer) -> None:
    a, b = candidates(1), candidates(2)
    a.election.start()
    b.election.start()
    old_fence = a.election.fence
    assert old_fence is not None and old_fence.epoch == 1
    expire_session(a.store.session.client, zookeeper_server.connect)
    wait_until(lambda: b.election.is_controller, what="b elected after a's session expired")
    assert b.events == ["elected 2"]
    wait_until(lambda: a.events == ["elected 1", "resigned"], what="a resigned")
    # a, on its new session, writes with the epoch it held: ZooKeeper refuses the write
    wait_until(lambda: a.store.image.controller_id == 2)
    with pytest.raises(NotControllerError, match="controller epoch 1 is no longer current"):
        a.store.write(a.store.image.epoch, [new_topic("zombie")], fence=old_fence)
    assert "zombie" not in a.store.image.topics
    assert b.election.write(b.store.image.epoch, [new_topic("fresh")]).topics.keys() == {"fresh"}
    # a stands again on its new session: when b goes, a is elected with the next epoch
    b.store.close()
    wait_until(lambda: a.election.is_controller, what="a elected again after b went")
    assert a.events == ["elected 1", "resigned", "elected 3"]


ZOMBIE = r"""
import sys
from strom.controller.election import ControllerElection
from strom.metadata.changes import PutTopic
from strom.metadata.image import PartitionInfo, TopicInfo
from strom.metadata.store import StaleMetadataError
from strom.metadata.zk_session import ZooKeeperUnavailableError
from strom.metadata.zookeeper import NotControllerError, ZooKeeperMetadataStore
import uuid

store = ZooKeeperMetadataStore(sys.argv[1], timeout=2.0, session_timeout=1.0)
election = ControllerElection(store, 7)
election.start()
fence = election.fence
print("elected", fence.epoch if fence else None, flush=True)
sys.stdin.readline()  # the test pauses and resumes us, then says "write"
topic = TopicInfo("zombie", uuid.uuid4(), (PartitionInfo(0, 7, 0, (7,), (7,)),), {})
while True:
    try:
        store.write(store.image.epoch, [PutTopic(topic)], fence=fence)
        print("written", flush=True)
    except NotControllerError as e:
        print("fenced", e, flush=True)
    except (ZooKeeperUnavailableError, StaleMetadataError):
        continue  # our session is being replaced, or the image moved: try again
    break
store.close()
"""


def test_a_paused_controller_that_wakes_up_cannot_write(
        candidates: Callable[[int], Candidate], zookeeper_connect: str) -> None:
    """SIGSTOP the controller's process until its session expires; another broker is
    elected; SIGCONT it and let it write with the epoch it held: refused, nothing written."""
    src = str(Path(strom.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": src}
    zombie = subprocess.Popen([sys.executable, "-c", ZOMBIE, zookeeper_connect], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert zombie.stdout is not None and zombie.stdin is not None
        assert zombie.stdout.readline().split() == ["elected", "1"]
        b = candidates(2)
        b.election.start()
        assert not b.election.is_controller
        zombie.send_signal(signal.SIGSTOP)
        wait_until(lambda: b.election.is_controller, what="b elected while the zombie sleeps")
        assert b.events == ["elected 2"]
        zombie.send_signal(signal.SIGCONT)
        zombie.stdin.write("write\n")
        zombie.stdin.flush()
        answer = zombie.stdout.readline()
        assert answer.startswith("fenced") and "controller epoch 1" in answer, answer
        assert zombie.wait(20) == 0
        assert "zombie" not in b.store.image.topics
        assert b.store.session.exists("/brokers/topics/zombie") is None
    finally:
        zombie.send_signal(signal.SIGCONT)
        zombie.kill()
        zombie.wait()


# -- brokers found dead by their listener (issue 22) --------------------------------------------

def registration_epoch(store: ZooKeeperMetadataStore, broker_id: int) -> int | None:
    """The czxid of ``/brokers/ids/<broker_id>`` (its broker epoch), None when absent."""
    found = store.session.get_or_none(f"/brokers/ids/{broker_id}")
    return None if found is None else int(found[1].czxid)


def test_the_controller_removes_a_dead_brokers_registration_of_that_epoch_only(
        candidates: Callable[[int], Candidate]) -> None:
    """Only the controller, only the registration of the broker epoch found dead; a live
    broker whose registration was removed (a wrong verdict) registers again, with a new
    epoch, which the old verdict cannot remove."""
    a, b = candidates(1), candidates(2)
    a.election.start()
    b.store.register_broker(BrokerInfo(2, "127.0.0.1", 1))
    first = registration_epoch(a.store, 2)
    assert first is not None
    with pytest.raises(NotControllerError):
        b.election.remove_dead_broker(2, first)
    assert not a.election.remove_dead_broker(2, first + 1)  # another incarnation's epoch
    assert registration_epoch(a.store, 2) == first
    assert a.election.remove_dead_broker(2, first)
    wait_until(lambda: (registration_epoch(a.store, 2) or first) != first,
               what="broker 2 registered again (its session lives)")
    second = registration_epoch(a.store, 2)
    assert not a.election.remove_dead_broker(2, first)
    assert registration_epoch(a.store, 2) == second
    wait_until(lambda: b.store.image.brokers.get(2) is not None
               and b.store.image.brokers[2].epoch == second)


def test_a_dead_controller_is_deposed_once_and_a_successor_elected(
        candidates: Callable[[int], Candidate]) -> None:
    a, b, c = candidates(1), candidates(2), candidates(3)
    a.store.register_broker(BrokerInfo(1, "127.0.0.1", 1))
    a.election.start()
    b.election.start()
    c.election.start()
    assert a.election.is_controller
    epoch = registration_epoch(b.store, 1)
    assert epoch is not None
    assert not b.election.depose_dead_controller(2, epoch)  # not the controller
    assert not b.election.depose_dead_controller(1, epoch + 1)  # not the epoch found dead
    assert b.store.session.get("/controller_epoch")[0] == b"1"
    a.election.withdraw()  # as a dead broker: it takes nothing back
    assert b.election.depose_dead_controller(1, epoch)
    assert not c.election.depose_dead_controller(1, epoch)  # the second one finds it done
    wait_until(lambda: b.store.session.get("/controller_epoch")[0] == b"2",
               what="the next election")
    wait_until(lambda: b.election.is_controller or c.election.is_controller)
    wait_until(lambda: a.events == ["elected 1", "resigned"], what="a learns it lost")
    assert registration_epoch(b.store, 1) == epoch  # the successor's to remove
    # the successor is never deposed by the old verdict
    assert not b.election.depose_dead_controller(1, epoch)
    successor = 2 if b.election.is_controller else 3
    assert not a.election.depose_dead_controller(successor, epoch)
    assert b.store.session.get("/controller_epoch")[0] == b"2"
