from strom.protocol import api
from strom.protocol.versions import (
    HAND_WRITTEN,
    SUPPORTED,
    ApiKey,
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
