"""How much one admin request may ask for: Kafka's per-request bounds on CreateTopics and
CreatePartitions, checked before anything is planned or allocated per partition.

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
"""

from __future__ import annotations

from collections.abc import Iterable

from strom.common.errors import PolicyViolationError
from strom.metadata.image import MetadataImage

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
