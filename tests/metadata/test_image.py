"""MetadataImage lookups."""

from __future__ import annotations

import dataclasses
import uuid

from strom.metadata.image import MetadataImage, PartitionInfo, TopicInfo


def topic(name: str) -> TopicInfo:
    return TopicInfo(name, uuid.uuid4(), (PartitionInfo(0, 0, 0, (0,), (0,)),))


def test_topic_by_id_follows_each_image_and_its_topics() -> None:
    a, b = topic("a"), topic("b")
    image = MetadataImage("c", 1, 0, {}, {"a": a, "b": b})
    assert image.topic_by_id(a.topic_id) is a and image.topic_by_id(b.topic_id) is b
    assert image.topic_by_id(uuid.uuid4()) is None
    # a new image (dataclasses.replace) does not inherit the previous one's index
    c = topic("c")
    newer = dataclasses.replace(image, epoch=2, topics={"a": a, "c": c})
    assert newer.topic_by_id(c.topic_id) is c and newer.topic_by_id(b.topic_id) is None
    # a topic of the same name created again (another id) is found by its new id only
    again = topic("a")
    recreated = dataclasses.replace(image, epoch=3, topics={"a": again, "b": b})
    assert recreated.topic_by_id(again.topic_id) is again
    assert recreated.topic_by_id(a.topic_id) is None
    # an image changed by hand after a lookup (tests do): a stale hit is not returned, and
    # a topic added is found
    image.topics["a"] = again
    assert image.topic_by_id(a.topic_id) is not a
    image.topics["c"] = c
    assert image.topic_by_id(c.topic_id) is c


def test_a_miss_does_not_scan_the_topics() -> None:
    topics = {f"t{i}": topic(f"t{i}") for i in range(100)}
    image = MetadataImage("c", 1, 0, {}, topics)
    assert image.topic_by_id(uuid.uuid4()) is None
    index = image._by_id
    for _ in range(10):
        assert image.topic_by_id(uuid.uuid4()) is None
    assert image._by_id is index  # not rebuilt
