from strom.common import errors


def test_error_for_known_and_unknown_codes() -> None:
    err = errors.error_for(3, "no such topic")
    assert isinstance(err, errors.UnknownTopicOrPartitionError)
    assert err.code == 3 and err.retriable
    assert "UNKNOWN_TOPIC_OR_PARTITION" in str(err)
    unknown = errors.error_for(9999)
    assert unknown.code == -1


def test_codes_unique_and_named_consistently() -> None:
    codes = [code for code, _, _ in errors._TABLE]
    assert len(codes) == len(set(codes))
    assert errors.error_class("MESSAGE_TOO_LARGE").code == 10
    assert errors.error_name(35) == "UNSUPPORTED_VERSION"


def test_every_kafka_4_4_code_is_named() -> None:
    # Kafka 4.4's Errors run from -1 to 136 without a gap; the last ones, as it names them
    # and with its retriable exceptions (read from kafka-clients 4.4.0).
    codes = {code for code, _, _ in errors._TABLE}
    assert set(range(0, 137)) <= codes | {0}
    assert errors.error_name(128) == "INVALID_REGULAR_EXPRESSION"
    assert errors.error_name(136) == "CONTROLLER_ID_NOT_REGISTERED"
    assert [c for c in range(121, 137) if errors.error_for(c).retriable] == [122, 123, 133]
