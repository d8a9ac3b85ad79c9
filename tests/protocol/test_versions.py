from pathlib import Path

from strom.protocol import api
from strom.protocol.versions import (
    ADVERTISED,
    HAND_WRITTEN,
    SUPPORTED,
    ApiKey,
    api_name,
    response_header_version,
)


def test_coherent_record_format_set() -> None:
    # librdkafka uses record batch v2 only if Fetch >= 4 and Produce >= 3 are advertised.
    assert SUPPORTED[ApiKey.FETCH][0] >= 4 and SUPPORTED[ApiKey.PRODUCE][0] >= 3


def test_every_supported_version_is_encodable() -> None:
    for key, (_low, high) in SUPPORTED.items():
        if key in HAND_WRITTEN:
            continue
        assert api.max_version(key) >= high, ApiKey(key).name


def test_api_versions_response_header_is_always_v0() -> None:
    assert response_header_version(ApiKey.API_VERSIONS, 4) == 0
    assert response_header_version(ApiKey.METADATA, 12) == 1


def test_docs_protocol_table_matches_the_code() -> None:
    # docs/protocol.md lists, per API, what strom lists and serves (and Kafka 4.4's ranges).
    table = Path(__file__).parents[2] / "docs" / "protocol.md"
    rows = {}
    for line in table.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].isdigit():
            rows[int(cells[0])] = cells

    def parse(cell: str) -> tuple[int, int] | None:
        if cell == "—":
            return None
        low, high = cell.split("-")
        return int(low), int(high)

    assert set(ADVERTISED) <= set(rows)
    for key, (_key, name, listed, served, _kafka) in rows.items():
        assert parse(listed) == ADVERTISED.get(key), name
        expected = SUPPORTED.get(key)
        assert (parse(listed) if served == "same" else parse(served)) == expected, name
        if key in SUPPORTED:
            assert name == api_name(key), key


def test_produce_is_listed_from_v0_and_served_from_v3() -> None:
    assert ADVERTISED[ApiKey.PRODUCE] == (0, SUPPORTED[ApiKey.PRODUCE][1])
    assert SUPPORTED[ApiKey.PRODUCE][0] == 3
    assert {k: r for k, r in ADVERTISED.items() if k != ApiKey.PRODUCE} == {
        k: r for k, r in SUPPORTED.items()
        if k not in (ApiKey.PRODUCE, ApiKey.CONTROLLED_SHUTDOWN)}


def test_controlled_shutdown_is_served_but_not_listed_as_kafka_4() -> None:
    assert ApiKey.CONTROLLED_SHUTDOWN in SUPPORTED
    assert ApiKey.CONTROLLED_SHUTDOWN not in ADVERTISED
