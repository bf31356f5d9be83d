"""Typed plugin args: a plugin declares a frozen dataclass `Args`; parse_args() turns the YAML mapping
into it once, with every default written in one place (the dataclass) and every error naming its field.

Field names are snake_case in Python and camelCase in YAML (`only_gpu_pods` reads `onlyGpuPods`);
`field(metadata={"key": "..."})` overrides the YAML key. Supported field types: str, int, float,
bool, Literal[...], X | None, tuple[X, ...], dict[str, X] and nested dataclasses. After parsing,
an Args class's `validate()` (if it has one) checks relations between fields and raises ArgsError.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from metrics_sched.config.errors import ArgsError, ConfigError
from metrics_sched.config.numbers import finite_number, integer_in_range, shown

__all__ = ["NoArgs", "check_args_class", "parse_args", "yaml_key"]

A = TypeVar("A")


@dataclasses.dataclass(frozen=True)
class NoArgs:
    """The Args of a plugin that takes none."""


def yaml_key(field: dataclasses.Field[Any]) -> str:
    key = field.metadata.get("key")
    if isinstance(key, str):
        return key
    head, *rest = field.name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _where(where: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if where else key


def _hints(cls: type[Any]) -> dict[str, Any]:
    """Field types, resolved where the class is written: an Args nested in a plugin class may name the
    plugin's other nested classes (annotations are strings under `from __future__ import annotations`)."""
    module = sys.modules.get(cls.__module__)
    localns: dict[str, Any] = {}
    owner: Any = module
    for part in cls.__qualname__.split(".")[:-1]:
        owner = getattr(owner, part, None)
        if owner is None:
            break
        localns.update(vars(owner))
    return typing.get_type_hints(cls, localns=localns)


def check_args_class(cls: type[Any], where: str = "Args") -> None:
    """Raises TypeError naming a field whose type parse_args cannot read: checked when a plugin is
    registered, not when a user first sets that field."""
    if not (dataclasses.is_dataclass(cls) and isinstance(cls, type)):
        raise TypeError(f"{where} must be a dataclass")
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        if f.init:
            _check_type(hints[f.name], f"{where}.{f.name}")


def _check_type(tp: Any, where: str) -> None:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        for option in get_args(tp):
            if option is not type(None):
                _check_type(option, where)
    elif origin is Literal:
        return
    elif origin is tuple:
        args = get_args(tp)
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"{where}: use tuple[X, ...] for a list, got {_describe(tp)}")
        _check_type(args[0], where)
    elif origin in (dict, Mapping, typing.Mapping):
        key, value = get_args(tp)
        if key is not str:
            raise TypeError(f"{where}: mapping keys must be str, got {_describe(tp)}")
        _check_type(value, where)
    elif dataclasses.is_dataclass(tp) and isinstance(tp, type):
        check_args_class(tp, where)
    elif tp not in (bool, int, float, str, Any):
        raise TypeError(f"{where}: unsupported args field type {_describe(tp)} "
                        "(use str, int, float, bool, Literal, X | None, tuple[X, ...], dict[str, X] or a dataclass)")


def _describe(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _convert(value: Any, tp: Any, where: str) -> Any:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        options = get_args(tp)
        if value is None and type(None) in options:
            return None
        rest = [t for t in options if t is not type(None)]
        if len(rest) == 1:
            return _convert(value, rest[0], where)
        errors = []
        for option in rest:
            try:
                return _convert(value, option, where)
            except (ArgsError, ConfigError) as exc:
                errors.append(exc.message)
        raise ArgsError(where, " or ".join(errors))
    if origin is Literal:
        choices = get_args(tp)
        if value not in choices:
            raise ArgsError(where, f"must be one of {', '.join(map(str, choices))}, got {shown(value)}")
        return value
    if origin is tuple:
        item_type = get_args(tp)[0]
        if not isinstance(value, list | tuple):
            raise ArgsError(where, f"must be a list, got {type(value).__name__}")
        return tuple(_convert(item, item_type, _where(where, i)) for i, item in enumerate(value))
    if origin in (dict, Mapping, typing.Mapping):
        _, value_type = get_args(tp)
        if not isinstance(value, Mapping):
            raise ArgsError(where, f"must be a mapping, got {type(value).__name__}")
        return {str(k): _convert(v, value_type, _where(where, str(k))) for k, v in value.items()}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return parse_args(tp, value, where)
    if tp is bool:
        if not isinstance(value, bool):
            raise ArgsError(where, f"must be true or false, got {shown(value)}")
        return value
    # Numbers follow the config's one rule (config.numbers): finite, and integers within 64 bits. A ConfigError
    # names the field as an ArgsError does: the loader prefixes either with the plugin's path.
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ArgsError(where, f"must be an integer, got {shown(value)}")
        return integer_in_range(value, where)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ArgsError(where, f"must be a finite number, got {shown(value)}")
        return finite_number(value, where)
    if tp is str:
        if not isinstance(value, str) or not value:
            raise ArgsError(where, f"must be a non-empty string, got {shown(value)}")
        return value
    if tp is Any:
        return value
    raise TypeError(f"{where}: unsupported args field type {_describe(tp)}")


def parse_args(cls: type[A], raw: Any, where: str = "") -> A:
    """Builds the Args dataclass `cls` from a YAML mapping (None = all defaults); ArgsError names the field (a
    ConfigError of config.numbers does, for a number that is not finite or an integer past 64 bits)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ArgsError(where or "args", f"must be a mapping, got {type(raw).__name__}")
    fields = {yaml_key(f): f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    for key in raw:
        if key not in fields:
            known = ", ".join(fields) or "none"
            raise ArgsError(_where(where, str(key)), f"unknown field (expected {known})")
    hints = _hints(cls)
    values = {f.name: _convert(raw[key], hints[f.name], _where(where, key)) for key, f in fields.items() if key in raw}
    try:
        parsed = cls(**values)
    except TypeError as exc:  # a required field is missing
        missing = [key for key, f in fields.items() if key not in raw
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        raise ArgsError(_where(where, missing[0]) if missing else (where or "args"), "is required") from exc
    validate = getattr(parsed, "validate", None)
    if validate is not None:
        try:
            validate()
        except ArgsError as exc:
            raise ArgsError(_where(where, exc.field) if exc.field else where, exc.message) from None
    return parsed
