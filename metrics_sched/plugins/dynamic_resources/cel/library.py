"""The Kubernetes functions of the DRA CEL environment that cel-expr-python lacks: the quantity and semver
libraries (apiserver pkg/cel/library/quantity.go, semverlib.go), the k8s Lists library v0 (lists.go), cel-go's
ext.Sets and the plain functions of ext.Lists v3.

How functions are bound (cel-expr-python 0.1.3 over the C++ runtime): the checker sees typed overloads, but the
runtime registers an implementation by the *kinds* of its arguments (int, string, list, message ...), so
overloads of one name that share kinds (list(int).min() and list(string).min(); Quantity.compareTo and
Semver.compareTo) can carry one implementation only, and the runtime converts its result by the return type of
the overload that carries it. Each function therefore gets typed overloads without implementation, for the
checker, plus one hidden overload per distinct kind signature that carries the implementation: its arguments
use `kubernetes.Unreachable`, a type no expression can produce (so the checker never picks it), and it returns
dyn where the visible overloads' results differ. The implementation then dispatches on the Python values.

Errors: an implementation raises FunctionError(upstream text); the runtime turns it into an error value that
selector.py maps back.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from metrics_sched.plugins.dynamic_resources.cel import quantity as q
from metrics_sched.plugins.dynamic_resources.cel import semver as sv
from metrics_sched.plugins.dynamic_resources.cel.runtime import cel, message
from metrics_sched.plugins.dynamic_resources.cel.types import (
    QUANTITY_TYPE,
    SEMVER_TYPE,
    UNREACHABLE_TYPE,
    QuantityMessage,
    SemverMessage,
)

__all__ = ["FUNCTIONS", "FunctionError", "quantity_message", "semver_message"]

T = cel.Type
QT = T(QUANTITY_TYPE)
ST = T(SEMVER_TYPE)
_NEVER = T(UNREACHABLE_TYPE)
_MIN_INT64 = -(2**63)
_MAX_INT64 = 2**63 - 1


class FunctionError(ValueError):
    """A CEL runtime error raised by one of our functions; the message is upstream's."""


# ---- values ---------------------------------------------------------------------------------------------------


def quantity_message(value: Fraction) -> message.Message:
    return QuantityMessage(value=q.canonical(value))


def semver_message(version: sv.Version) -> message.Message:
    return SemverMessage(major=version.major, minor=version.minor, patch=version.patch, pre=version.pre_text())


def _kind(value: Any) -> str:
    if isinstance(value, message.Message):
        return str(value.DESCRIPTOR.full_name)
    return type(value).__name__


def _quantity(value: Any) -> Fraction:
    if not (isinstance(value, message.Message) and value.DESCRIPTOR.full_name == QUANTITY_TYPE):
        raise FunctionError("no such overload")
    return q.from_canonical(value.value)


def _semver(value: Any) -> sv.Version:
    if not (isinstance(value, message.Message) and value.DESCRIPTOR.full_name == SEMVER_TYPE):
        raise FunctionError("no such overload")
    pre = value.pre
    return sv.Version(value.major, value.minor, value.patch,
                      tuple(int(p) if p.isdigit() else p for p in pre.split(".")) if pre else ())


def _compare(a: Any, b: Any) -> int:
    """compareTo of two Quantities or two Semvers (the checker pairs them; dyn values may not)."""
    if _kind(a) != _kind(b):
        raise FunctionError("no such overload")
    if _kind(a) == QUANTITY_TYPE:
        left, right = _quantity(a), _quantity(b)
        return (left > right) - (left < right)
    return sv.compare(_semver(a), _semver(b))


def _int_arg(value: Any) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FunctionError("no such overload")
    return Fraction(value)


def _arith(sign: int) -> Callable[[Any, Any], message.Message]:
    def impl(a: Any, b: Any) -> message.Message:
        other = _quantity(b) if isinstance(b, message.Message) else _int_arg(b)
        return quantity_message(_quantity(a) + sign * other)
    return impl


def _to_quantity(text: Any) -> message.Message:
    try:
        return quantity_message(q.parse_quantity(str(text)))
    except q.QuantityError as err:
        raise FunctionError(str(err)) from None


def _is_quantity(text: Any) -> bool:
    try:
        q.parse_quantity(str(text))
    except q.QuantityError:
        return False
    return True


def _as_integer(a: Any) -> int:
    value = _quantity(a)
    if not q.is_int64(value):
        raise FunctionError("cannot convert value to integer")
    return value.numerator


def _to_semver(text: Any, normalize: Any = False) -> message.Message:
    try:
        return semver_message(sv.parse_semver(str(text), bool(normalize)))
    except sv.SemverError as err:
        raise FunctionError(str(err)) from None


def _is_semver(text: Any, normalize: Any = False) -> bool:
    try:
        sv.parse_semver(str(text), bool(normalize))
    except sv.SemverError:
        return False
    return True


# ---- CEL equality and ordering on plain values (lists, sets) ------------------------------------------------------


def cel_equal(a: Any, b: Any) -> bool:
    """CEL's heterogeneous equality on the values the runtime hands to Python: numbers compare across int,
    uint and double; bool, string, bytes, lists, maps and messages only with their own kind."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(cel_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(cel_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, bytes | bytearray) and isinstance(b, bytes | bytearray):
        return bytes(a) == bytes(b)
    if type(a) is not type(b):
        return False
    return bool(a == b)


def _is_sorted(items: list[Any]) -> bool:
    return all(not (b < a) for a, b in itertools.pairwise(items))


def _sum(items: list[Any]) -> Any:
    total: Any = 0
    for item in items:
        total = total + item
        if isinstance(total, int) and not _MIN_INT64 <= total <= _MAX_INT64:
            raise FunctionError("integer overflow")
    return total


def _extreme(name: str, pick: Callable[[Sequence[Any]], Any]) -> Callable[[list[Any]], Any]:
    def impl(items: list[Any]) -> Any:
        if not items:
            raise FunctionError(f"{name} called on empty list")
        return pick(items)
    return impl


def _sets_contains(items: list[Any], sub: list[Any]) -> bool:
    return all(any(cel_equal(x, y) for x in items) for y in sub)


def _sets_equivalent(a: list[Any], b: list[Any]) -> bool:
    return _sets_contains(a, b) and _sets_contains(b, a)


def _sets_intersects(a: list[Any], b: list[Any]) -> bool:
    return any(cel_equal(x, y) for x in a for y in b)


def _slice(items: list[Any], start: int, end: int) -> list[Any]:
    if start < 0 or end < 0:
        raise FunctionError(f"cannot slice({start}, {end}), negative indexes not supported")
    if start > end:
        raise FunctionError(f"cannot slice({start}, {end}), start index must be less than or equal to end index")
    if len(items) < end:
        raise FunctionError(f"cannot slice({start}, {end}), list is length {len(items)}")
    return items[start:end]


def _flatten(items: list[Any], depth: int = 1) -> list[Any]:
    if depth < 0:
        raise FunctionError("level must be non-negative")
    out: list[Any] = []
    for item in items:
        if isinstance(item, list) and depth > 0:
            out.extend(_flatten(item, depth - 1))
        else:
            out.append(item)
    return out


def _distinct(items: list[Any]) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if not any(cel_equal(item, seen) for seen in out):
            out.append(item)
    return out


def _range(n: int) -> list[int]:
    return list(range(n))


def _approximate_float(a: Any) -> float:
    value = _quantity(a)
    try:
        return float(value)
    except OverflowError:
        return math.copysign(math.inf, value)


# ---- declarations -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Sig:
    """One visible overload: id, result, parameters (receiver first for members)."""

    id: str
    result: cel.Type
    params: tuple[cel.Type, ...]


def _function(name: str, impl: Callable[..., Any], sigs: Sequence[_Sig], *, member: bool,
              carriers: Sequence[tuple[tuple[cel.Type, ...], cel.Type]] = ()) -> cel.FunctionDecl:
    """The typed overloads plus the hidden implementation carriers (parameters, result). Without explicit
    carriers, the first visible overload carries the implementation (all of them share kinds and result)."""
    overloads = [cel.Overload(s.id, s.result, list(s.params), is_member=member) for s in sigs]
    if carriers:
        overloads += [cel.Overload(f"{name}_impl_{i}", result, list(params), is_member=member, impl=impl)
                      for i, (params, result) in enumerate(carriers)]
    else:
        first = sigs[0]
        overloads[0] = cel.Overload(first.id, first.result, list(first.params), is_member=member, impl=impl)
    return cel.FunctionDecl(name, overloads)


_COMPARABLE = {"int": T.INT, "uint": T.UINT, "double": T.DOUBLE, "bool": T.BOOL, "string": T.STRING,
               "bytes": T.BYTES}
# The runtime cannot hand a Python uint, duration or timestamp back as a dyn result: min/max/sum/sort over
# those element types are left undeclared (a compile error) rather than wrong at run time.
_RETURNABLE = {"int": T.INT, "double": T.DOUBLE, "bool": T.BOOL, "string": T.STRING, "bytes": T.BYTES}
_SUMMABLE = {"int": T.INT, "double": T.DOUBLE}
# Element types for sets.*, distinct, reverse and slice.
_ELEMENTS = {"int": T.INT, "uint": T.UINT, "double": T.DOUBLE, "bool": T.BOOL, "string": T.STRING,
             "bytes": T.BYTES, "quantity": QT, "semver": ST}
_LIST_OF_NEVER = T.List(_NEVER)


def _quantity_library() -> list[cel.FunctionDecl]:
    return [
        _function("quantity", _to_quantity, [_Sig("string_to_quantity", QT, (T.STRING,))], member=False),
        _function("isQuantity", _is_quantity, [_Sig("is_quantity_string", T.BOOL, (T.STRING,))], member=False),
        _function("sign", lambda a: (_quantity(a) > 0) - (_quantity(a) < 0),
                  [_Sig("quantity_sign", T.INT, (QT,))], member=False),
        _function("asApproximateFloat", _approximate_float, [_Sig("quantity_get_float", T.DOUBLE, (QT,))],
                  member=True),
        _function("asInteger", _as_integer, [_Sig("quantity_get_int", T.INT, (QT,))], member=True),
        _function("isInteger", lambda a: q.is_int64(_quantity(a)), [_Sig("quantity_is_integer", T.BOOL, (QT,))],
                  member=True),
        cel.FunctionDecl("add", [
            cel.Overload("quantity_add", QT, [QT, QT], is_member=True, impl=_arith(1)),
            cel.Overload("quantity_add_int", QT, [QT, T.INT], is_member=True, impl=_arith(1))]),
        cel.FunctionDecl("sub", [
            cel.Overload("quantity_sub", QT, [QT, QT], is_member=True, impl=_arith(-1)),
            cel.Overload("quantity_sub_int", QT, [QT, T.INT], is_member=True, impl=_arith(-1))]),
    ]


def _comparison_library() -> list[cel.FunctionDecl]:
    """compareTo/isLessThan/isGreaterThan of both Quantity and Semver: one message-kind implementation."""
    return [
        _function(name, impl, [_Sig(f"quantity_{suffix}", result, (QT, QT)),
                               _Sig(f"semver_{suffix}", result, (ST, ST))], member=True)
        for name, suffix, result, impl in (
            ("compareTo", "compare_to", T.INT, _compare),
            ("isLessThan", "is_less_than", T.BOOL, lambda a, b: _compare(a, b) < 0),
            ("isGreaterThan", "is_greater_than", T.BOOL, lambda a, b: _compare(a, b) > 0),
        )
    ]


def _semver_library() -> list[cel.FunctionDecl]:
    return [
        cel.FunctionDecl("semver", [
            cel.Overload("string_to_semver", ST, [T.STRING], impl=_to_semver),
            cel.Overload("string_bool_to_semver", ST, [T.STRING, T.BOOL], impl=_to_semver)]),
        cel.FunctionDecl("isSemver", [
            cel.Overload("is_semver_string", T.BOOL, [T.STRING], impl=_is_semver),
            cel.Overload("is_semver_string_bool", T.BOOL, [T.STRING, T.BOOL], impl=_is_semver)]),
        *(_function(part, (lambda field: lambda a: getattr(_semver(a), field))(part),
                    [_Sig(f"semver_{part}", T.INT, (ST,))], member=True)
          for part in ("major", "minor", "patch")),
    ]


def _lists_library() -> list[cel.FunctionDecl]:
    """Kubernetes' Lists library, version 0 (1.36): isSorted, sum, min, max. Not indexOf and lastIndexOf: the
    strings extension declares those names for strings, and cel-expr-python cannot add overloads to a function
    an extension declared (ALREADY_EXISTS), so list.indexOf(x) is a compile error naming it."""
    def list_of(types: dict[str, cel.Type], fmt: str, result: Callable[[cel.Type], cel.Type]) -> list[_Sig]:
        return [_Sig(fmt.format(name), result(t), (T.List(t),)) for name, t in types.items()]

    return [
        _function("isSorted", _is_sorted, list_of(_COMPARABLE, "list_{}_is_sorted_bool", lambda _: T.BOOL),
                  member=True),
        _function("sum", _sum, list_of(_SUMMABLE, "list_{0}_sum_{0}", lambda t: t), member=True,
                  carriers=[((_LIST_OF_NEVER,), T.DYN)]),
        _function("min", _extreme("min", min), list_of(_RETURNABLE, "list_{0}_min_{0}", lambda t: t),
                  member=True, carriers=[((_LIST_OF_NEVER,), T.DYN)]),
        _function("max", _extreme("max", max), list_of(_RETURNABLE, "list_{0}_max_{0}", lambda t: t),
                  member=True, carriers=[((_LIST_OF_NEVER,), T.DYN)]),
    ]


def _sets_library() -> list[cel.FunctionDecl]:
    """cel-go's ext.Sets: sets.contains, sets.equivalent, sets.intersects over lists of one element type."""
    out = []
    for name, impl in (("contains", _sets_contains), ("equivalent", _sets_equivalent),
                       ("intersects", _sets_intersects)):
        sigs = [_Sig(f"list_sets_{name}_list_{elem}", T.BOOL, (T.List(t), T.List(t)))
                for elem, t in _ELEMENTS.items()]
        out.append(_function(f"sets.{name}", impl, sigs, member=False))
    return out


def _ext_lists_library() -> list[cel.FunctionDecl]:
    """The plain functions of cel-go's ext.Lists v3 (sortBy is a macro: see selector.py). first() and last()
    come with cel-expr-python's optional extension."""
    def same(fmt: str, types: dict[str, cel.Type], extra: tuple[cel.Type, ...] = ()) -> list[_Sig]:
        return [_Sig(fmt.format(name), T.List(t), (T.List(t), *extra)) for name, t in types.items()]

    dyn_list = [((_LIST_OF_NEVER,), T.List(T.DYN))]
    return [
        _function("lists.range", _range, [_Sig("lists_range", T.List(T.INT), (T.INT,))], member=False),
        _function("slice", _slice, same("list_{}_slice", _ELEMENTS, (T.INT, T.INT)), member=True,
                  carriers=[((_LIST_OF_NEVER, T.INT, T.INT), T.List(T.DYN))]),
        cel.FunctionDecl("flatten", [
            cel.Overload("list_flatten", T.List(T.DYN), [T.List(T.List(T.DYN))], is_member=True, impl=_flatten),
            cel.Overload("list_flatten_int", T.List(T.DYN), [T.List(T.DYN), T.INT], is_member=True,
                         impl=_flatten)]),
        _function("sort", sorted, same("list_{}_sort", _RETURNABLE), member=True, carriers=dyn_list),
        _function("distinct", _distinct, same("list_{}_distinct", _ELEMENTS), member=True, carriers=dyn_list),
        _function("reverse", lambda items: items[::-1], same("list_{}_reverse", _ELEMENTS), member=True,
                  carriers=dyn_list),
    ]


FUNCTIONS: list[cel.FunctionDecl] = [
    *_quantity_library(),
    *_comparison_library(),
    *_semver_library(),
    *_lists_library(),
    *_sets_library(),
    *_ext_lists_library(),
]
