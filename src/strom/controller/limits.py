"""How much one admin request, and one broker, may be given: Kafka's per-request bounds on
CreateTopics and CreatePartitions and strom's per-broker partition bound, each checked before
anything is planned or allocated per partition.

As Apache Kafka 4.x's controller (``ReplicationControlManager``, KAFKA-17870 / KAFKA-19673;
the same answers come from a Kafka 4.4 broker), whole-request refusals with POLICY_VIOLATION
(44) for every topic of the request, ``validate_only`` included:

* CreateTopics: the partitions the request asks for — each topic's assignment count, else
  ``num.partitions`` for ``-1``, else its positive count — summed in request order, above
  :data:`MAX_PARTITIONS_PER_REQUEST` (10,000): "Excessively large number of partitions per
  request." The sum stops at the first topic past the bound, so it cannot grow large.
* CreateTopics, the metadata records it would write — one per topic, per partition and per
  config override — above :data:`MAX_RECORDS_PER_REQUEST` (10,000): "Unable to perform
  excessively large batch operation." (one topic of 10,000 partitions is refused, one of
  9,999 accepted). Kafka counts the topics that pass validation; this counts every topic
  asked for, so a request mixing invalid topics into 10,000 records is refused a little
  earlier than Kafka would.
* CreatePartitions: the partitions added to existing topics (count above the current one),
  summed, above 10,000: "Excessively large number of additional partitions per request."

Without these, one CreatePartitions asking for 1,000,000 partitions made a broker create
partition directories for minutes and stop serving everyone.

Per broker (strom's; Kafka has none — KIP-578 proposed ``max.broker.partitions`` and was never
adopted): ``max.broker.partitions`` bounds the partition replicas one broker hosts. A topic
creation or partition addition that would place more on some broker is refused with
POLICY_VIOLATION for that topic, naming the broker and the limit. Internal topics the
broker creates itself (``__consumer_offsets``, ``__transaction_state``) are exempt, and
counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from strom.common.errors import PolicyViolationError
from strom.metadata.image import MetadataImage, PartitionInfo, TopicInfo

#: Kafka's ``ReplicationControlManager.MAX_PARTITIONS_PER_BATCH``.
MAX_PARTITIONS_PER_REQUEST = 10_000
#: Kafka's ``QuorumController.MAX_RECORDS_PER_USER_OP``.
MAX_RECORDS_PER_REQUEST = 10_000

TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."
TOO_MANY_ADDED_PARTITIONS = "Excessively large number of additional partitions per request."
TOO_MANY_RECORDS = "Unable to perform excessively large batch operation."


def requested_partitions(num_partitions: int, assignments: int, default: int) -> int:
    """What one CreateTopics topic counts towards the request's bound."""
    if assignments:
        return assignments
    if num_partitions == -1:
        return default
    return max(num_partitions, 0)


def check_new_topics(topics: Iterable[tuple[int, int]]) -> None:
    """CreateTopics: refuse (PolicyViolationError) a request whose topics — ``(partitions,
    config overrides)`` each — ask for more than 10,000 partitions or metadata records."""
    partitions = records = 0
    for count, configs in topics:
        partitions += count
        if partitions > MAX_PARTITIONS_PER_REQUEST:
            raise PolicyViolationError(TOO_MANY_PARTITIONS)
        records += 1 + count + configs
    if records > MAX_RECORDS_PER_REQUEST:
        raise PolicyViolationError(TOO_MANY_RECORDS)


def check_added_partitions(image: MetadataImage, wanted: Iterable[tuple[str, int]]) -> None:
    """CreatePartitions: refuse a request adding more than 10,000 partitions to existing
    topics (``wanted``: topic name and requested total count)."""
    total = 0
    for name, count in wanted:
        topic = image.topics.get(name)
        if topic is None or count < 0:
            continue
        added = count - len(topic.partitions)
        if added > 0:
            total += added
            if total > MAX_PARTITIONS_PER_REQUEST:
                raise PolicyViolationError(TOO_MANY_ADDED_PARTITIONS)


def check_records(created: Iterable[TopicInfo]) -> None:
    """CreateTopics after validation: one record per topic, partition and config override."""
    records = 0
    for topic in created:
        records += 1 + len(topic.partitions) + len(topic.configs)
        if records > MAX_RECORDS_PER_REQUEST:
            raise PolicyViolationError(TOO_MANY_RECORDS)


class ReplicaCounter:
    """Partition replicas per broker of the latest image asked about, kept incrementally: a
    newer image is compared with the previous one topic by topic (a changed topic is a new
    ``TopicInfo`` object), so only the changed topics' partitions are walked again."""

    def __init__(self) -> None:
        self._image: MetadataImage | None = None
        self._counts: dict[int, int] = {}

    def counts(self, image: MetadataImage) -> dict[int, int]:
        """A copy of the counts of ``image``."""
        previous = self._image
        if previous is not image:
            if previous is None:
                counts: dict[int, int] = {}
                _add(counts, image.topics.values(), 1)
            else:
                counts = self._counts
                old, new = previous.topics, image.topics
                _add(counts, (t for n, t in old.items() if new.get(n) is not t), -1)
                _add(counts, (t for n, t in new.items() if old.get(n) is not t), 1)
            self._image, self._counts = image, counts
        return dict(self._counts)


def _add(counts: dict[int, int], topics: Iterable[TopicInfo], sign: int) -> None:
    for topic in topics:
        for p in topic.partitions:
            for replica in p.replicas:
                counts[replica] = counts.get(replica, 0) + sign


class BrokerPartitionCounts:
    """Partition replicas per broker (``counts``, from :class:`ReplicaCounter`) plus what a
    batch of changes planned against the same image adds; :meth:`check` refuses new
    partitions that would take a broker past ``limit``."""

    def __init__(self, counts: dict[int, int], limit: int) -> None:
        self.limit = limit
        self._counts = counts

    def check(self, topic: str, partitions: Sequence[PartitionInfo], *,
              exempt: bool = False) -> None:
        """Refuse (POLICY_VIOLATION) unless every broker stays within the limit once
        ``partitions`` are added; counts them unless refused."""
        added: dict[int, int] = {}
        for p in partitions:
            for replica in p.replicas:
                added[replica] = added.get(replica, 0) + 1
        counts = self._counts
        if not exempt:
            for broker, extra in sorted(added.items()):
                hosted = counts.get(broker, 0)
                if hosted + extra > self.limit:
                    raise PolicyViolationError(
                        f"Adding {len(partitions)} partition(s) of topic {topic} would give "
                        f"broker {broker} {hosted + extra} partition replicas, above its "
                        f"limit max.broker.partitions={self.limit} (it hosts {hosted}).")
        for broker, extra in added.items():
            counts[broker] = counts.get(broker, 0) + extra

    def hosted(self) -> Mapping[int, int]:
        return dict(self._counts)
