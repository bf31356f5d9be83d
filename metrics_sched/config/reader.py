"""Readers for the plain data YAML gives (mappings, lists, scalars): one toolkit for every config parser.

The scheduler config, the freshness contracts, the telemetry sources' specs and plugin args all parse
with these, so a mistake reads the same everywhere: `ConfigError(field, message)` whose `field` is the
full dotted path of the offending value (`sources[0].metrics[2].scale`, `profiles[0].plugins`).

Conventions:
- `where` is the dotted path of the mapping being read ("" at the top); `field_name(where, key)` joins it
  with a key (or a list index) into the path of one value.
- `read_*(spec, key, where, default)` read `spec[key]`; a missing key takes `default`, and a missing key
  without a default (or an explicit `null`) is "is required".
- `mapping(value, field)` / `sequence(value, field)` check a value already in hand (list items, args).
- Unknown keys are refused by `check_keys`, never ignored: a typo must not silently fall back to a default.
- Every number is finite and within range (`metrics_sched.config.numbers`): NaN, the infinities and
  integers past 64 bits are refused by the readers themselves, whatever range the caller asks for.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, TypeVar

from metrics_sched.config.durations import parse_duration
from metrics_sched.config.errors import ConfigError
from metrics_sched.config.numbers import finite_number, integer_in_range

__all__ = [
    "check_json_shaped", "check_keys", "field_name", "mapping", "read_bool", "read_choice", "read_duration",
    "read_float", "read_int", "read_str", "sequence",
]

T = TypeVar("T", bound=str)


def field_name(where: str, key: str | int) -> str:
    """The path of `key` inside `where`: `field_name("a.b", "c") == "a.b.c"`, `field_name("xs", 2) == "xs[2]"`."""
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if where else key


def mapping(value: object, field: str, *, optional: bool = False) -> Mapping[str, Any]:
    """`value` as a mapping with string keys; with `optional`, None (an empty YAML section) reads as {}."""
    if value is None and optional:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(field, f"must be a mapping, got {type(value).__name__}")
    for key in value:
        if not isinstance(key, str):
            raise ConfigError(field, f"keys must be strings, got {key!r}")
    return value


def sequence(value: object, field: str, *, optional: bool = False, non_empty: bool = False) -> list[Any]:
    """`value` as a list; with `optional`, None reads as []; with `non_empty`, [] is refused."""
    if value is None and optional:
        value = []
    if not isinstance(value, list):
        raise ConfigError(field, f"must be a list, got {type(value).__name__}")
    if non_empty and not value:
        raise ConfigError(field, "must be a non-empty list")
    return value


def check_keys(spec: Mapping[str, Any], known: Collection[str], where: str) -> None:
    """Refuses the first key of `spec` that is not in `known`, naming it and listing the known ones."""
    for key in spec:
        if key not in known:
            raise ConfigError(field_name(where, str(key)),
                              f"unknown field (expected one of: {', '.join(sorted(known))})")


# A config holds hundreds of values; YAML aliases can make a short file expand to billions ("billion laughs"),
# which the walk below, the config hash (json.dumps) and every reader would expand in full.
MAX_EXPANDED_VALUES = 100_000


def check_json_shaped(data: Mapping[str, Any]) -> None:
    """Refuses, naming the path, a mapping key anywhere in `data` that is not a string. A config is JSON-shaped
    (KubeSchedulerConfiguration is JSON): YAML's `1:`, `on:` or `~:` keys mean nothing in it, and parts read
    later (a source's spec, plugin args) must not break the config's hash (sorted keys) before they are.
    Refuses too what YAML aliases can build and JSON cannot: a value that contains itself (`a: &x [*x]`,
    on which every walk would loop forever), or more than MAX_EXPANDED_VALUES values once aliases expand."""
    expanded: dict[int, int] = {}  # a container's id -> its values counted with aliases expanded (checked once)
    on_path: set[int] = set()  # containers being checked: meeting one again inside itself is a cycle
    stack: list[tuple[str, object, bool]] = [("", data, False)]
    while stack:  # a loop, not recursion: YAML nests deeper than Python recurses
        where, value, finished = stack.pop()
        if not isinstance(value, Mapping | list):
            continue
        key = id(value)
        items = list(value.values()) if isinstance(value, Mapping) else value
        if finished:
            on_path.discard(key)
            expanded[key] = 1 + sum(expanded.get(id(item), 1) for item in items)
            if expanded[key] > MAX_EXPANDED_VALUES:
                raise ConfigError(where, f"expands to more than {MAX_EXPANDED_VALUES} values (YAML aliases?)")
            continue
        if key in expanded:
            continue  # an alias of a value already checked
        if key in on_path:
            raise ConfigError(where, "contains itself (a recursive YAML alias)")
        on_path.add(key)
        stack.append((where, value, True))
        if isinstance(value, Mapping):
            for name, item in value.items():
                if not isinstance(name, str):
                    raise ConfigError(where, f"keys must be strings, got {name!r}")
                stack.append((field_name(where, name), item, False))
        else:
            stack.extend((field_name(where, i), item, False) for i, item in enumerate(value))


def _value(spec: Mapping[str, Any], key: str, where: str, default: object) -> object:
    value = spec.get(key, default)
    if value is None:
        raise ConfigError(field_name(where, key), "is required")
    return value


def read_str(spec: Mapping[str, Any], key: str, where: str, default: str | None = None, *,
             non_empty: bool = False) -> str:
    """A string; with `non_empty` it is stripped and must not be empty then."""
    value = _value(spec, key, where, default)
    if not isinstance(value, str):
        raise ConfigError(field_name(where, key), f"must be a string, got {type(value).__name__}")
    if non_empty:
        value = value.strip()
        if not value:
            raise ConfigError(field_name(where, key), "must not be empty")
    return value


def read_choice(spec: Mapping[str, Any], key: str, where: str, choices: tuple[T, ...], default: T | None = None) -> T:
    """One of `choices` (typed as the Literal the caller gives)."""
    value = read_str(spec, key, where, default)
    for choice in choices:
        if choice == value:
            return choice
    raise ConfigError(field_name(where, key), f"must be one of {', '.join(choices)}, got {value!r}")


def read_float(spec: Mapping[str, Any], key: str, where: str, default: float | None = None, *,
               positive: bool = False, minimum: float | None = None) -> float:
    """A finite number (an int is accepted, a bool is not); `positive` means > 0, `minimum` means >= it."""
    value = _value(spec, key, where, default)
    field = field_name(where, key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(field, f"must be a finite number, got {value!r}")
    number = finite_number(value, field)
    if positive and number <= 0:
        raise ConfigError(field, f"must be > 0, got {value!r}")
    if minimum is not None and number < minimum:
        raise ConfigError(field, f"must be >= {minimum:g}, got {value!r}")
    return number


def read_int(spec: Mapping[str, Any], key: str, where: str, default: int | None = None, *,
             minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer (a bool or 1.0 is not), within [minimum, maximum] when given."""
    value = _value(spec, key, where, default)
    field = field_name(where, key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(field, f"must be an integer, got {value!r}")
    integer_in_range(value, field)
    if minimum is not None and value < minimum:
        raise ConfigError(field, f"must be >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ConfigError(field, f"must be <= {maximum}, got {value!r}")
    return value


def read_bool(spec: Mapping[str, Any], key: str, where: str, default: bool | None = None) -> bool:
    """true or false (YAML's booleans; the strings "true"/"yes" are refused as ambiguous)."""
    value = _value(spec, key, where, default)
    if not isinstance(value, bool):
        raise ConfigError(field_name(where, key), f"must be true or false, got {value!r}")
    return value


def read_duration(spec: Mapping[str, Any], key: str, where: str, default: float | None = None, *,
                  positive: bool = True, minimum: float | None = None, maximum: float | None = None) -> float:
    """Seconds, from a number or a Go-style duration ("15s", "1m30s", "500ms"); > 0 unless not `positive`
    (then >= 0), and within [minimum, maximum] seconds when given."""
    field = field_name(where, key)
    seconds = parse_duration(_value(spec, key, where, default), field)
    if positive and seconds <= 0:
        raise ConfigError(field, "must be > 0")
    if minimum is not None and seconds < minimum:
        raise ConfigError(field, f"must be at least {minimum:g}s, got {seconds:g}s")
    if maximum is not None and seconds > maximum:
        raise ConfigError(field, f"must be at most {maximum:g}s, got {seconds:g}s")
    return seconds
