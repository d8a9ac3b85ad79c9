"""After the metadata was recovered from its previous copy: keep the topics found on disk.

:class:`~strom.metadata.local.LocalMetadataStore` falls back to the copy of the metadata one
write older when the current file is damaged. That write may have created a topic or added
partitions whose logs (and acknowledged records) are on disk; the replica manager deletes the
logs of topics the image does not name, so before it sees the image those topics are put back
— with the partition count found on disk, one replica, default configs and a new topic id
(the lost write's configs and id are not recoverable; the logs are labelled with the new id),
``__consumer_offsets`` with its own internal settings — each with a WARNING.
"""

from __future__ import annotations

import logging

from strom.broker.state import BrokerState
from strom.coordinator.group.records import OFFSETS_TOPIC
from strom.storage.log_manager import LogManager

log = logging.getLogger("strom.broker")


def keep_topics_on_disk(state: BrokerState, logs: LogManager) -> None:
    """Make the metadata name every topic and partition that has a log in ``logs``."""
    on_disk: dict[str, int] = {}
    for tp in logs.partitions():
        on_disk[tp.topic] = max(on_disk.get(tp.topic, 0), tp.partition + 1)
    for topic, count in sorted(on_disk.items()):
        known = state.store.image.topics.get(topic)
        if known is None:
            # Start-up only found these logs (they open on first use, checked against the
            # metadata's topic id): open them now, unchecked, so the topic created around
            # them adopts them instead of replacing logs labelled with the lost id.
            config = state.topic_config(topic)
            for tp in [tp for tp in logs.partitions() if tp.topic == topic]:
                logs.create(tp.topic, tp.partition, config)
            if topic == OFFSETS_TOPIC:
                state.ensure_offsets_topic()
            else:
                state.create_topic(topic, count, 1)
            topic_id = state.store.image.topics[topic].topic_id
            for plog in logs.logs():
                if plog.topic == topic:
                    plog.assign_topic_id(topic_id, replace=True)
            log.warning("topic %s has logs on disk but not in the recovered metadata: kept, "
                        "with %d partition(s) and default configs", topic, count)
        elif len(known.partitions) < count:
            state.add_partitions(topic, count)
            log.warning("topic %s has %d partition(s) on disk but %d in the recovered "
                        "metadata: the partitions are kept", topic, count,
                        len(known.partitions))
