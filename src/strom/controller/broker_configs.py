"""Dynamic broker configs (Kafka's KIP-226) through a metadata store.

A resource is the cluster-wide default (name ``""``) or one broker (its id, ``"1"``). Its
configs are raw strings, as users set them; :meth:`BrokerConfigAdmin.set_configs` replaces
the whole set after Kafka's checks (AlterConfigs replaces, IncrementalAlterConfigs edits the
current set first): a broker id that is not this broker's, a key that cannot change at run
time or an invalid value is INVALID_REQUEST with Kafka's message, as a KRaft broker answers.
Brokers apply the stored configs when the image changes (:mod:`strom.broker.dynamic_config`).

Synchronous and single-threaded: called from the broker's event loop.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

from strom.common.config import BROKER_KEYS, ignored_config_notes, validate_dynamic_broker_configs
from strom.common.errors import InvalidRequestError
from strom.controller.updates import update
from strom.metadata.changes import MetadataChange, SetBrokerConfigs
from strom.metadata.image import MetadataImage
from strom.metadata.store import MetadataStore

log = logging.getLogger("strom.controller")
CLUSTER_DEFAULT = ""
_INTEGER = re.compile(r"[+-]?[0-9]+")  # what Java's Integer.parseInt accepts (within range)


class BrokerConfigAdmin:
    """The dynamic configs of broker ``node_id`` and of the cluster default, in ``store``."""

    def __init__(self, store: MetadataStore, node_id: int) -> None:
        self._store = store
        self._node_id = node_id

    def configs(self, resource: str) -> dict[str, str]:
        """The stored dynamic configs of ``resource`` (none: empty), after
        :meth:`check_resource`."""
        return dict(self._store.image.broker_configs.get(self._stored_as(resource), {}))

    def check_resource(self, resource: str) -> None:
        """INVALID_REQUEST unless ``resource`` is ``""`` or this broker's id (Kafka's
        messages: a request for another broker must be sent to that broker)."""
        if resource == CLUSTER_DEFAULT:
            return
        if _INTEGER.fullmatch(resource) is None:
            raise InvalidRequestError(f"Node id must be an integer, but it is: {resource}")
        if int(resource) != self._node_id:
            raise InvalidRequestError(
                f"Unexpected broker id, expected {self._node_id}, but received {resource}")

    def _stored_as(self, resource: str) -> str:
        self.check_resource(resource)
        return str(self._node_id) if resource else CLUSTER_DEFAULT

    def set_configs(self, resource: str, configs: Mapping[str, str], *,
                    validate_only: bool = False) -> None:
        """Replace the dynamic configs of ``resource`` with ``configs`` (validated first)."""
        key = self._stored_as(resource)
        wanted = dict(configs)
        validate_dynamic_broker_configs(wanted)

        def plan(_image: MetadataImage) -> tuple[list[MetadataChange], None]:
            return [SetBrokerConfigs(key, wanted)], None

        update(self._store, plan, validate_only)
        if not validate_only:
            where = f"broker {key}" if key else "the cluster default"
            log.info("dynamic configs of %s set to %s", where, wanted)
            for note in ignored_config_notes(BROKER_KEYS, wanted):
                log.warning("Broker config of %s: %s", where, note)
