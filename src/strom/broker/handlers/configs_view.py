"""Describing configurations: the entries DescribeConfigs and CreateTopics (v5+) return.

Every key is listed with its value, source (topic override, static broker config or default),
read-only and sensitive flags, type and documentation, and — when asked — its synonyms in
precedence order, as Kafka does.
"""

from __future__ import annotations

from typing import Any

from strom.common.config import (
    BROKER_KEYS,
    TOPIC_KEYS,
    BrokerConfig,
    ConfigSource,
    TopicConfig,
)


def topic_entries(
    config: TopicConfig,
    keys: list[str] | None,
    include_synonyms: bool,
    include_docs: bool,
) -> list[dict[str, Any]]:
    broker = config.broker
    out = []
    for name in keys if keys is not None else list(TOPIC_KEYS):
        key = TOPIC_KEYS.get(name)
        if key is None:
            continue
        overridden = config.overrides.get(name) is not None
        synonyms: list[dict[str, Any]] = []
        if overridden:
            synonyms.append({"name": name, "value": key.render(config.overrides[name]),
                             "source": ConfigSource.DYNAMIC_TOPIC_CONFIG})
        for broker_name in (key.synonym, *key.extra_synonyms):
            if broker_name and broker.is_set(broker_name):
                bkey = BROKER_KEYS[broker_name]
                synonyms.append({"name": broker_name,
                                 "value": bkey.render(broker.explicit()[broker_name]),
                                 "source": ConfigSource.STATIC_BROKER_CONFIG})
        default_name = key.synonym or name
        synonyms.append({"name": default_name, "value": key.render(key.default),
                         "source": ConfigSource.DEFAULT_CONFIG})
        source = synonyms[0]["source"]
        out.append({
            "name": name,
            "value": None if key.sensitive else key.render(config.get(name)),
            "read_only": False,
            "config_source": source,
            "is_default": source == ConfigSource.DEFAULT_CONFIG,
            "is_sensitive": key.sensitive,
            "synonyms": synonyms if include_synonyms else [],
            "config_type": key.type,
            "documentation": key.doc if include_docs else None,
        })
    return out


def broker_entries(
    config: BrokerConfig, keys: list[str] | None, include_synonyms: bool, include_docs: bool
) -> list[dict[str, Any]]:
    out = []
    for name in keys if keys is not None else list(BROKER_KEYS):
        key = BROKER_KEYS.get(name)
        if key is None:
            continue
        explicit = config.is_set(name)
        source = ConfigSource.STATIC_BROKER_CONFIG if explicit else ConfigSource.DEFAULT_CONFIG
        value = config.get(name)
        synonyms = []
        if include_synonyms:
            if explicit:
                synonyms.append({"name": name, "value": key.render(value),
                                 "source": ConfigSource.STATIC_BROKER_CONFIG})
            if key.default is not None:
                synonyms.append({"name": name, "value": key.render(key.default),
                                 "source": ConfigSource.DEFAULT_CONFIG})
        out.append({
            "name": name,
            "value": None if key.sensitive else key.render(value),
            "read_only": True,
            "config_source": source,
            "is_default": not explicit,
            "is_sensitive": key.sensitive,
            "synonyms": synonyms,
            "config_type": key.type,
            "documentation": key.doc if include_docs else None,
        })
    return out
