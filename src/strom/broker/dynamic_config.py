"""Dynamic broker configs applied to the running broker (Kafka's ``DynamicBrokerConfig``).

The stored configs live in the metadata image (``broker_configs``: the cluster default under
``""``, this broker's under its id). :func:`effective_config` layers them over the static
config; :class:`DynamicConfigApplier`, subscribed to the metadata store, installs the new
effective config whenever either set changes: ``BrokerState.config`` is replaced, every hosted
partition re-reads its topic config (topics without an override pick up the new defaults:
retention, segments, flush, ``max.message.bytes`` …) and the log cleaner takes its new backoff
and I/O cap. Keys whose value a component only reads at start-up are not dynamic
(``strom.common.config`` declares which are). Owned by the event-loop thread.
"""

from __future__ import annotations

import logging

from strom.broker.state import BrokerState
from strom.common.config import BROKER_KEYS, BrokerConfig, ignored_config_notes
from strom.controller.broker_configs import CLUSTER_DEFAULT
from strom.metadata.image import MetadataImage

log = logging.getLogger("strom.broker")


def stored_dynamic_configs(image: MetadataImage, node_id: int
                           ) -> tuple[dict[str, str], dict[str, str]]:
    """(cluster default, this broker's) dynamic configs as stored in ``image``."""
    return (dict(image.broker_configs.get(CLUSTER_DEFAULT, {})),
            dict(image.broker_configs.get(str(node_id), {})))


def effective_config(static: BrokerConfig, image: MetadataImage, node_id: int) -> BrokerConfig:
    """``static`` under the dynamic configs stored in ``image``."""
    return static.with_dynamic(*stored_dynamic_configs(image, node_id))


def warn_ignored(config: BrokerConfig) -> None:
    """Log a warning for each config set that strom accepts but ignores."""
    for note in ignored_config_notes(BROKER_KEYS, config.explicit()):
        log.warning("%s", note)


class DynamicConfigApplier:
    """Installs the effective config in ``state`` when the stored dynamic configs change."""

    def __init__(self, static: BrokerConfig, state: BrokerState) -> None:
        self._static = static
        self._state = state
        self._applied = stored_dynamic_configs(state.store.image, state.node_id)

    def __call__(self, image: MetadataImage) -> None:
        stored = stored_dynamic_configs(image, self._state.node_id)
        if stored == self._applied:
            return
        self._applied = stored
        config = self._static.with_dynamic(*stored)
        state = self._state
        state.config = config
        state.replicas.update_all_configs()
        state.replicas.logs.reconfigure(config)
        log.info("applied dynamic broker configs: cluster default %s, broker %d %s",
                 stored[0], state.node_id, stored[1])
