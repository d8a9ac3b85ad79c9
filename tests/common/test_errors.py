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
