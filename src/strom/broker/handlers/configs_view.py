"""Describing configurations: the entries DescribeConfigs and CreateTopics (v5+) return.

Every key is listed with its value, source, read-only and sensitive flags, type and
documentation, and — when asked — its synonyms in Kafka's precedence order: the topic override,
then each broker layer (this broker's dynamic config, the dynamic cluster default, the static
config) over every broker key that sets the value (``log.retention.ms``, ``…minutes``,
``…hours``), then the built-in defaults. The source is that of the first synonym.

A broker's entries start their synonyms at the described key (Kafka drops the higher-precedence
names before it: ``log.retention.hours`` does not list ``log.retention.ms``), and a broker key
is read-only unless it can change at run time. The cluster-default resource (name ``""``) lists
only the dynamic default configs that are set, as Kafka does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from strom.common.config import (
    BROKER_KEYS,
    TOPIC_KEYS,
    BrokerConfig,
    ConfigKey,
    ConfigSource,
    ConfigSynonym,
    ConfigValue,
    TopicConfig,
    broker_synonym_names,
)


def _wire(synonym: ConfigSynonym, key: ConfigKey) -> dict[str, Any]:
    return {"name": synonym.name,
            "value": None if key.sensitive else BROKER_KEYS[synonym.name].render(synonym.value),
            "source": synonym.source}


def _entry(key: ConfigKey, value: ConfigValue, synonyms: list[dict[str, Any]], read_only: bool,
           include_synonyms: bool, include_docs: bool) -> dict[str, Any]:
    source = synonyms[0]["source"] if synonyms else ConfigSource.DEFAULT_CONFIG
    return {
        "name": key.name,
        "value": None if key.sensitive else key.render(value),
        "read_only": read_only,
        "config_source": source,
        "is_default": source == ConfigSource.DEFAULT_CONFIG,
        "is_sensitive": key.sensitive,
        "synonyms": synonyms if include_synonyms else [],
        "config_type": key.type,
        "documentation": key.doc if include_docs else None,
    }


def _selected(keys: list[str] | None, names: Iterable[str]) -> list[str]:
    known = list(names)
    return known if keys is None else [n for n in keys if n in set(known)]


def topic_entries(
    config: TopicConfig,
    keys: list[str] | None,
    include_synonyms: bool,
    include_docs: bool,
) -> list[dict[str, Any]]:
    broker = config.broker
    out = []
    for name in _selected(keys, TOPIC_KEYS):
        key = TOPIC_KEYS[name]
        synonyms: list[dict[str, Any]] = []
        if config.overrides.get(name) is not None:
            synonyms.append({"name": name, "value": key.render(config.overrides[name]),
                             "source": ConfigSource.DYNAMIC_TOPIC_CONFIG})
        if key.synonym is not None:
            synonyms += [_wire(s, key)
                         for s in broker.synonyms(broker_synonym_names(key.synonym))]
        else:
            synonyms.append({"name": name, "value": key.render(key.default),
                             "source": ConfigSource.DEFAULT_CONFIG})
        out.append(_entry(key, config.get(name), synonyms, False, include_synonyms,
                          include_docs))
    return out


def broker_entries(
    config: BrokerConfig, keys: list[str] | None, include_synonyms: bool, include_docs: bool
) -> list[dict[str, Any]]:
    """Every broker key, as this broker runs with it."""
    out = []
    for name in _selected(keys, BROKER_KEYS):
        key = BROKER_KEYS[name]
        out.append(_entry(key, config.get(name), _broker_synonyms(config, name), not key.dynamic,
                          include_synonyms, include_docs))
    return out


def cluster_default_entries(
    config: BrokerConfig, keys: list[str] | None, include_synonyms: bool, include_docs: bool
) -> list[dict[str, Any]]:
    """The dynamic cluster-wide default configs that are set (resource name ``""``)."""
    defaults = config.layer(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    out = []
    for name in _selected(keys, defaults):
        key = BROKER_KEYS[name]
        synonyms = [s for s in _broker_synonyms(config, name)
                    if s["source"] == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
        out.append(_entry(key, defaults[name], synonyms, not key.dynamic, include_synonyms,
                          include_docs))
    return out


def _broker_synonyms(config: BrokerConfig, name: str) -> list[dict[str, Any]]:
    key = BROKER_KEYS[name]
    synonyms = [_wire(s, key) for s in config.synonyms(broker_synonym_names(name))]
    for i, synonym in enumerate(synonyms):
        if synonym["name"] == name:
            return synonyms[i:]
    return []
