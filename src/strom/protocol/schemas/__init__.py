"""Message classes for the APIs kafka-python has no JSON schema for, from schemas written here.

Each ``*.json`` beside this module describes one Kafka request or response in Kafka's message
schema language (fields, versions, flexible versions), written for strom from the protocol
documentation (KIP-848 for ConsumerGroupHeartbeat / ConsumerGroupDescribe). The classes are
kafka-python ``ApiMessage`` subclasses built from them, so :mod:`strom.protocol.api` and
:mod:`strom.protocol.strict` treat them like the library's own.

- ``ConsumerGroupHeartbeat`` (68) v0-1: v1 adds ``SubscribedTopicRegex`` and requires a
  client-generated member id (KIP-1082).
- ``ConsumerGroupDescribe`` (69) v0-1: v1 adds the member's ``MemberType`` (KIP-1099).
"""

from __future__ import annotations

import sys

from kafka.protocol.api_message import ApiMessage

_HERE = sys.modules[__name__]


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=_HERE):  # type: ignore[misc,call-arg]
    pass


class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=_HERE):  # type: ignore[misc,call-arg]
    pass


class ConsumerGroupDescribeRequest(ApiMessage, load_json=_HERE):  # type: ignore[misc,call-arg]
    pass


class ConsumerGroupDescribeResponse(ApiMessage, load_json=_HERE):  # type: ignore[misc,call-arg]
    pass
