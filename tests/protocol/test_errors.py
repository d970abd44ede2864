"""Error codes are wire values (pinned here and in docs/protocol.md section 10);
remote errors are ProtocolError subclasses, local misuse is not."""
from __future__ import annotations

from broker.protocol.errors import (CorruptMessageError, ErrorCode, FrameTooLargeError,
                                    MessageTooLargeError, ProtocolError, SamsaError)


def test_wire_values():
    assert {c.name: int(c) for c in ErrorCode} == {
        "NONE": 0, "UNKNOWN": 1, "UNKNOWN_TOPIC_OR_PARTITION": 2, "OFFSET_OUT_OF_RANGE": 3,
        "MESSAGE_TOO_LARGE": 4, "CORRUPT_MESSAGE": 5, "INVALID_REQUEST": 6, "STORAGE_ERROR": 7,
        "TOPIC_ALREADY_EXISTS": 8, "UNSUPPORTED_VERSION": 9, "REQUEST_TIMED_OUT": 10,
        "INVALID_TOPIC": 11, "INVALID_CONFIG": 12, "BROKER_SHUTTING_DOWN": 13,
        "INVALID_OFFSET": 14, "NOT_LEADER_FOR_PARTITION": 15, "NOT_ENOUGH_REPLICAS": 16,
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND": 17, "FENCED_LEADER_EPOCH": 18,
        "UNKNOWN_LEADER_EPOCH": 19, "SASL_AUTHENTICATION_FAILED": 20,
        "UNSUPPORTED_SASL_MECHANISM": 21, "ILLEGAL_SASL_STATE": 22,
        "TOPIC_AUTHORIZATION_FAILED": 23, "CLUSTER_AUTHORIZATION_FAILED": 24}


def test_every_code_is_documented():
    import pathlib
    doc = pathlib.Path(__file__).parents[2] / "docs" / "protocol.md"
    text = doc.read_text()
    for code in ErrorCode:
        assert f"| {int(code)} | `{code.name}` |" in text


def test_exception_hierarchy_and_codes():
    assert issubclass(CorruptMessageError, ProtocolError)
    assert issubclass(MessageTooLargeError, CorruptMessageError)
    assert issubclass(FrameTooLargeError, ProtocolError)
    assert not issubclass(ProtocolError, ValueError)
    assert ProtocolError.code == ErrorCode.INVALID_REQUEST
    assert CorruptMessageError.code == ErrorCode.CORRUPT_MESSAGE
    assert MessageTooLargeError.code == ErrorCode.MESSAGE_TOO_LARGE


def test_samsa_error_carries_code_message_and_fields():
    err = SamsaError(3, "out of range", earliest=10, high_watermark=24)
    assert err.code is ErrorCode.OFFSET_OUT_OF_RANGE
    assert (err.message, err.earliest, err.high_watermark) == ("out of range", 10, 24)
    assert err.fields == {"earliest": 10, "high_watermark": 24}
    assert str(err) == "OFFSET_OUT_OF_RANGE: out of range earliest=10 high_watermark=24"
    assert not err.retriable
    assert SamsaError(ErrorCode.REQUEST_TIMED_OUT).retriable
    assert SamsaError(ErrorCode.BROKER_SHUTTING_DOWN).retriable
    assert str(SamsaError(13)) == "BROKER_SHUTTING_DOWN"


def test_samsa_error_with_an_unknown_code():
    err = SamsaError(999, "from a newer broker")
    assert err.code == 999
    assert str(err) == "ERROR_999: from a newer broker"
    assert not err.retriable


def test_which_codes_are_retriable():
    """The "retry" column of docs/protocol.md section 10: a resend (to the
    partition's leader, once refreshed) may succeed after these and only
    these. FENCED_LEADER_EPOCH is not: the sender must first learn the newer
    epoch, or it is fenced again."""
    retriable = {code for code in ErrorCode if SamsaError(code).retriable}
    assert retriable == {
        ErrorCode.REQUEST_TIMED_OUT, ErrorCode.BROKER_SHUTTING_DOWN,
        ErrorCode.NOT_LEADER_FOR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.UNKNOWN_LEADER_EPOCH}
    assert not SamsaError(ErrorCode.FENCED_LEADER_EPOCH).retriable
    assert str(SamsaError(15, "leader is broker 2")) == \
        "NOT_LEADER_FOR_PARTITION: leader is broker 2"
