"""The control-plane adapter (:mod:`strom.protocol.api`)."""

from __future__ import annotations

from strom.protocol import api
from strom.protocol.versions import ApiKey


def _configs(n: int) -> list[dict[str, object]]:
    return [{"name": f"config.{j}", "value": str(j), "read_only": False, "config_source": 5,
             "is_sensitive": False} for j in range(n)]


def test_prebuilt_struct_elements_encode_as_their_dicts() -> None:
    """A listing built once with response_structs and shared by every topic of a
    CreateTopics v7 answer encodes to the same bytes as the same dicts per topic."""
    shared = api.response_structs(ApiKey.CREATE_TOPICS, 7, ("topics", "configs"), _configs(3))

    def entry(i: int, configs: list[object]) -> dict[str, object]:
        return {"name": f"t{i}", "error_code": 0, "error_message": None, "num_partitions": 1,
                "replication_factor": 1, "configs": configs}

    with_dicts = api.response(ApiKey.CREATE_TOPICS, 7, {"throttle_time_ms": 0, "topics": [
        entry(i, _configs(3)) for i in range(4)]})
    with_shared = api.response(ApiKey.CREATE_TOPICS, 7, {"throttle_time_ms": 0, "topics": [
        entry(i, shared) for i in range(4)]})
    assert with_shared == with_dicts
    decoded = api.decode_response(ApiKey.CREATE_TOPICS, 7, with_shared)
    assert [[c.name for c in t.configs] for t in decoded.topics] == [
        ["config.0", "config.1", "config.2"]] * 4
