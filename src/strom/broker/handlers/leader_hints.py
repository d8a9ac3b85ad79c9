"""Current-leader hints in Produce (v10+) and Fetch (v16+) answers (KIP-951).

A partition answered NOT_LEADER_OR_FOLLOWER (Produce; Fetch also FENCED_LEADER_EPOCH) carries
``current_leader`` = (leader id, leader epoch) as this broker knows it, so a client can move
to the new leader without waiting for a Metadata round trip. As in Kafka's KafkaApis
(``getCurrentLeader``): the hosted replica's view first (its leader id, -1 when it knows
none, and its epoch), else the metadata image's partition state, else (-1, -1) — which the
encoder leaves out, being the field's default. The response's ``node_endpoints`` lists only
the leaders named in hints, each once, with the endpoint of the listener the request came
in on; a leader that is not a live broker, or has no such listener, gets no endpoint (its
hint is still sent).

Wire format: see :func:`strom.protocol.fast.encode_produce_response` /
:func:`~strom.protocol.fast.encode_fetch_response` (tagged fields: partition tag 0 / 1,
response tag 0). Event-loop only, like the handlers.
"""

from __future__ import annotations

from collections.abc import Iterable

from strom.broker.state import BrokerState
from strom.common.errors import error_class
from strom.protocol import fast

NOT_LEADER_OR_FOLLOWER = error_class("NOT_LEADER_OR_FOLLOWER").code
FENCED_LEADER_EPOCH = error_class("FENCED_LEADER_EPOCH").code
#: The first versions whose responses carry hints.
PRODUCE_HINT_VERSION = 10
FETCH_HINT_VERSION = 16
#: The partition errors that carry a hint.
PRODUCE_HINTED = frozenset({NOT_LEADER_OR_FOLLOWER})
FETCH_HINTED = frozenset({NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH})
NO_LEADER = (-1, -1)


def current_leader(state: BrokerState, topic: str, partition: int) -> tuple[int, int]:
    """(leader id, leader epoch) of a partition as this broker knows it (see the module)."""
    hosted = state.replicas.get(topic, partition)
    if hosted is not None:
        return hosted.leader_id, hosted.leader_epoch
    info = state.store.image.topics.get(topic)
    if info is None or not 0 <= partition < len(info.partitions):
        return NO_LEADER
    known = info.partitions[partition]
    return known.leader, known.leader_epoch


def in_image(state: BrokerState, topic: str, partition: int) -> bool:
    """Whether the metadata image has the partition (a broker that does not host it then
    answers NOT_LEADER_OR_FOLLOWER, as Kafka; UNKNOWN_TOPIC_OR_PARTITION otherwise)."""
    info = state.store.image.topics.get(topic)
    return info is not None and 0 <= partition < len(info.partitions)


def node_endpoints(state: BrokerState, listener: str | None,
                   leaders: Iterable[tuple[int, int] | None]) -> list[fast.NodeEndpoint]:
    """The endpoints of the live brokers among ``leaders`` (hints; None and -1 skipped), on
    ``listener``, in node-id order."""
    brokers = state.store.image.brokers
    out = []
    for node_id in sorted({hint[0] for hint in leaders if hint is not None and hint[0] >= 0}):
        broker = brokers.get(node_id)
        address = broker.address(listener) if broker is not None else None
        if broker is not None and address is not None:
            out.append(fast.NodeEndpoint(node_id, address[0], address[1], broker.rack))
    return out


def fetch_hints(topics: list[fast.FetchTopicResult]) -> Iterable[tuple[int, int] | None]:
    return (p.current_leader for topic in topics for p in topic.partitions)


def produce_hints(topics: list[fast.ProduceTopicResult]) -> Iterable[tuple[int, int] | None]:
    return (p.current_leader for topic in topics for p in topic.partitions)
