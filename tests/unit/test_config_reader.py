"""metrics_sched.config.reader: the readers every config parser shares; errors carry the full field path."""

from __future__ import annotations

from typing import Any

import pytest

from metrics_sched.config import ConfigError
from metrics_sched.config.contract import FreshnessContract, OnMissing, parse_contract
from metrics_sched.config.reader import (
    check_keys,
    field_name,
    mapping,
    read_bool,
    read_choice,
    read_duration,
    read_float,
    read_int,
    read_str,
    sequence,
)

pytestmark = pytest.mark.unit


def error(call: Any, *args: Any, **kwargs: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        call(*args, **kwargs)
    assert str(info.value).startswith(f"{info.value.field}: ")
    return info.value


def test_field_name_joins_keys_and_indexes() -> None:
    assert field_name("", "url") == "url"
    assert field_name("sources[0]", "auth") == "sources[0].auth"
    assert field_name("metrics", 2) == "metrics[2]"


def test_mapping_and_sequence() -> None:
    assert mapping({"a": 1}, "x") == {"a": 1}
    assert mapping(None, "x", optional=True) == {}
    assert error(mapping, None, "args").field == "args"
    assert "keys must be strings" in error(mapping, {1: "a"}, "metrics").message
    assert sequence(None, "xs", optional=True) == []
    assert error(sequence, {"a": 1}, "xs").message == "must be a list, got dict"
    assert error(sequence, [], "xs", non_empty=True).message == "must be a non-empty list"


def test_check_keys_names_the_unknown_key_and_lists_the_known_ones() -> None:
    check_keys({"a": 1}, {"a", "b"}, "p")
    refused = error(check_keys, {"a": 1, "c": 2}, {"a", "b"}, "profiles[0]")
    assert refused.field == "profiles[0].c" and refused.message == "unknown field (expected one of: a, b)"


@pytest.mark.parametrize(("call", "spec", "kwargs", "expected"), [
    (read_str, {"k": " v "}, {}, " v "),
    (read_str, {"k": " v "}, {"non_empty": True}, "v"),
    (read_str, {}, {"default": "d"}, "d"),
    (read_float, {"k": 2}, {}, 2.0),
    (read_float, {"k": 0}, {"minimum": 0}, 0.0),
    (read_int, {"k": 3}, {"minimum": 1, "maximum": 3}, 3),
    (read_bool, {"k": False}, {"default": True}, False),
    (read_duration, {"k": "1m30s"}, {}, 90.0),
    (read_duration, {"k": 0}, {"positive": False}, 0.0),
    (read_choice, {"k": "b"}, {"choices": ("a", "b")}, "b"),
])
def test_readers_accept(call: Any, spec: dict[str, Any], kwargs: dict[str, Any], expected: object) -> None:
    assert call(spec, "k", "w", **kwargs) == expected


@pytest.mark.parametrize(("call", "spec", "kwargs", "message"), [
    (read_str, {}, {}, "is required"),
    (read_str, {"k": None}, {"default": "d"}, "is required"),
    (read_str, {"k": 1}, {}, "must be a string, got int"),
    (read_str, {"k": "  "}, {"non_empty": True}, "must not be empty"),
    (read_float, {"k": True}, {}, "must be a finite number, got True"),
    (read_float, {"k": float("nan")}, {}, "must be a finite number, got nan"),
    (read_float, {"k": 0}, {"positive": True}, "must be > 0, got 0"),
    (read_float, {"k": -1}, {"minimum": 0}, "must be >= 0, got -1"),
    (read_int, {"k": 1.0}, {}, "must be an integer, got 1.0"),
    (read_int, {"k": 0}, {"minimum": 1}, "must be >= 1, got 0"),
    (read_int, {"k": 9}, {"maximum": 5}, "must be <= 5, got 9"),
    (read_bool, {"k": "yes"}, {}, "must be true or false, got 'yes'"),
    (read_duration, {"k": "soon"}, {}, "must be a duration like '15s' or '1m30s', got 'soon'"),
    (read_duration, {"k": 0}, {}, "must be > 0"),
    (read_duration, {"k": "3s"}, {"maximum": 2}, "must be at most 2s, got 3s"),
    (read_choice, {"k": "c"}, {"choices": ("a", "b")}, "must be one of a, b, got 'c'"),
])
def test_readers_refuse_naming_the_full_field(call: Any, spec: dict[str, Any], kwargs: dict[str, Any],
                                              message: str) -> None:
    refused = error(call, spec, "k", "sources[1].auth", **kwargs)
    assert refused.field == "sources[1].auth.k" and refused.message == message


def test_freshness_contract_parsing() -> None:
    assert parse_contract(None, "metrics.t") == FreshnessContract()
    assert parse_contract({"ttl": "30s", "maxAge": 90, "onMissing": "deny"}, "metrics.t") == \
        FreshnessContract(ttl=30.0, max_age=90.0, on_missing=OnMissing.DENY)
    assert error(parse_contract, {"ttl": 0}, "metrics.t").field == "metrics.t.ttl"
    assert error(parse_contract, {"maxAge": "-1s"}, "metrics.t").field == "metrics.t.maxAge"
    assert error(parse_contract, {"onMissing": "skip"}, "metrics.t").field == "metrics.t.onMissing"
    assert error(parse_contract, {"max_age": 1}, "metrics.t").field == "metrics.t.max_age"
