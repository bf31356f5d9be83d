"""The Kubernetes CEL functions of the DRA environment against upstream's tables: TestQuantity of apiserver
pkg/cel/library/quantity_test.go and TestSemver of semver_test.go (case names cited), plus the k8s Lists, ext.Sets
and ext.Lists functions and the quantity parser's edge cases (apimachinery resource.ParseQuantity)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from metrics_sched.plugins.dynamic_resources.cel import CelCompileError, CelRuntimeError, SelectorCache
from metrics_sched.plugins.dynamic_resources.cel.environment import environment
from metrics_sched.plugins.dynamic_resources.cel.quantity import QuantityError, parse_quantity
from metrics_sched.plugins.dynamic_resources.cel.runtime import cel
from metrics_sched.plugins.dynamic_resources.cel.selector import runtime_message
from metrics_sched.plugins.dynamic_resources.cel.semver import SemverError, Version, compare, parse_semver

pytestmark = pytest.mark.unit

ERROR = object()


def evaluate(expression: str) -> Any:
    """The expression's value in the DRA environment (no device), or CelRuntimeError with upstream's text.
    Library functions return non-bool values, which CompiledSelector.matches refuses: evaluated directly."""
    env = environment().env
    try:
        program = env.compile(expression)
    except RuntimeError as err:
        raise CelCompileError(str(err)) from None
    try:
        result = program.eval(data={})
    except RuntimeError as err:
        raise CelRuntimeError(runtime_message(str(err))) from None
    if result.type() == cel.Type.ERROR:
        raise CelRuntimeError(runtime_message(str(result.value())))
    return result.value()


def quantity_value(expression: str) -> Fraction:
    message = evaluate(expression)
    return Fraction(message.value)


# quantity_test.go TestQuantity: name -> (expression, expected value | runtime error text | compile error text).
QUANTITY: dict[str, tuple[str, Any]] = {
    "parse": ('quantity("12Mi")', Fraction(12 * 2**20)),
    "parseInvalidSuffix": ('quantity("10Mo")', CelRuntimeError("quantities must match the regular expression")),
    "parseInvalidSuffixPassesRegex": ('quantity("10Mm")', CelRuntimeError("unable to parse quantity's suffix")),
    "isQuantity": ('isQuantity("20")', True),
    "isQuantity_megabytes": ('isQuantity("20M")', True),
    "isQuantity_mebibytes": ('isQuantity("20Mi")', True),
    "isQuantity_invalidSuffix": ('isQuantity("20Mo")', False),
    "isQuantity_passingRegex": ('isQuantity("10Mm")', False),
    "isQuantity_noOverload": ("isQuantity([1, 2, 3])",
                              CelCompileError("found no matching overload for 'isQuantity' applied to")),
    "equality_reflexivity": ('quantity("200M") == quantity("200M")', True),
    "equality_symmetry": ('quantity("200M") == quantity("0.2G") && quantity("0.2G") == quantity("200M")', True),
    "equality_transitivity": ('quantity("2M") == quantity("0.002G") && quantity("2000k") == quantity("2M") && '
                              'quantity("0.002G") == quantity("2000k")', True),
    "inequality": ('quantity("200M") == quantity("0.3G")', False),
    "quantity_less": ('quantity("50M").isLessThan(quantity("50Mi"))', True),
    "quantity_less_obvious": ('quantity("50M").isLessThan(quantity("100M"))', True),
    "quantity_less_false": ('quantity("100M").isLessThan(quantity("50M"))', False),
    "quantity_greater": ('quantity("50Mi").isGreaterThan(quantity("50M"))', True),
    "quantity_greater_obvious": ('quantity("150Mi").isGreaterThan(quantity("100Mi"))', True),
    "quantity_greater_false": ('quantity("50M").isGreaterThan(quantity("100M"))', False),
    "compare_equal": ('quantity("200M").compareTo(quantity("0.2G"))', 0),
    "compare_less": ('quantity("50M").compareTo(quantity("50Mi"))', -1),
    "compare_greater": ('quantity("50Mi").compareTo(quantity("50M"))', 1),
    "add_quantity": ('quantity("50k").add(quantity("20")) == quantity("50.02k")', True),
    "add_int": ('quantity("50k").add(20).isLessThan(quantity("50020"))', False),
    "sub_quantity": ('quantity("50k").sub(quantity("20")) == quantity("49.98k")', True),
    "sub_int": ('quantity("50k").sub(20) == quantity("49980")', True),
    "arith_chain_1": ('quantity("50k").add(20).sub(quantity("100k")).asInteger()', -49980),
    "arith_chain": ('quantity("50k").add(20).sub(quantity("100k")).sub(-50000).asInteger()', 20),
    "as_integer": ('quantity("50k").asInteger()', 50000),
    "as_integer_error": ('quantity("9999999999999999999999999999999999999G").asInteger()',
                         CelRuntimeError("cannot convert value to integer")),
    # Upstream has two cases named "is_integer".
    "is_integer (huge)": ('quantity("9999999999999999999999999999999999999G").isInteger()', False),
    "is_integer": ('quantity("50").isInteger()', True),
    "as_float": ('quantity("50.703k").asApproximateFloat()', 50703.0),
    "add_does_not_mutate_receiver": ('[quantity("9999999999999999999999999999999999999")].all(x, '
                                     'x.add(quantity("1")).compareTo(x.add(quantity("2"))) == -1)', True),
}

# semver_test.go TestSemver.
SEMVER: dict[str, tuple[str, Any]] = {
    "parse": ('semver("1.2.3")', Version(1, 2, 3)),
    "parseInvalidVersion": ('semver("v1.0")', CelRuntimeError("No Major.Minor.Patch elements found")),
    "isSemver": ('isSemver("1.2.3-beta.1+build.1")', True),
    "isSemver_empty_false": ('isSemver("")', False),
    "isSemver_v_prefix_false": ('isSemver("v1.0.0")', False),
    "isSemver_v_leading_whitespace_false": ('isSemver(" 1.0.0")', False),
    "isSemver_v_contains_whitespace_false": ('isSemver("1. 0.0")', False),
    "isSemver_v_trailing_whitespace_false": ('isSemver("1.0.0 ")', False),
    "isSemver_leading_zeros_false": ('isSemver("01.01.01")', False),
    "isSemver_major_only_false": ('isSemver("1")', False),
    "isSemver_major_minor_only_false": ('isSemver("1.1")', False),
    "isSemver_empty_normalize_false": ('isSemver("", true)', False),
    "isSemver_v_leading_whitespace_normalize_false": ('isSemver(" 1.0.0", true)', False),
    "isSemver_v_contains_whitespace_normalize_false": ('isSemver("1. 0.0", true)', False),
    "isSemver_v_trailing_whitespace_normalize_false": ('isSemver("1.0.0 ", true)', False),
    "isSemver_v_prefix_normalize_true": ('isSemver("v1.0.0", true)', True),
    "isSemver_leading_zeros_normalize_true": ('isSemver("01.01.01", true)', True),
    "isSemver_major_only_normalize_true": ('isSemver("1", true)', True),
    "isSemver_major_minor_only_normalize_true": ('isSemver("1.1", true)', True),
    "isSemver_noOverload": ("isSemver([1, 2, 3])",
                            CelCompileError("found no matching overload for 'isSemver' applied to")),
    "equality_normalize": ('semver("v01.01", true) == semver("1.1.0")', True),
    "equality_reflexivity": ('semver("1.2.3") == semver("1.2.3")', True),
    "inequality": ('semver("1.2.3") == semver("1.0.0")', False),
    "semver_less": ('semver("1.0.0").isLessThan(semver("1.2.3"))', True),
    "semver_less_false": ('semver("1.0.0").isLessThan(semver("1.0.0"))', False),
    "semver_greater": ('semver("1.2.3").isGreaterThan(semver("1.0.0"))', True),
    "semver_greater_false": ('semver("1.0.0").isGreaterThan(semver("1.0.0"))', False),
    "compare_equal": ('semver("1.2.3").compareTo(semver("1.2.3"))', 0),
    "compare_less": ('semver("1.0.0").compareTo(semver("1.2.3"))', -1),
    "compare_greater": ('semver("1.2.3").compareTo(semver("1.0.0"))', 1),
    "major": ('semver("1.2.3").major()', 1),
    "minor": ('semver("1.2.3").minor()', 2),
    "patch": ('semver("1.2.3").patch()', 3),
}


def check(expression: str, expected: Any) -> None:
    if isinstance(expected, CelRuntimeError | CelCompileError):
        with pytest.raises(type(expected)) as failure:
            evaluate(expression)
        assert str(expected) in str(failure.value)
        return
    value = evaluate(expression)
    if isinstance(expected, Fraction):
        assert Fraction(value.value) == expected
    elif isinstance(expected, Version):
        assert (value.major, value.minor, value.patch, value.pre) == (
            expected.major, expected.minor, expected.patch, expected.pre_text())
    else:
        assert type(value) is type(expected) and value == expected


@pytest.mark.parametrize("name", sorted(QUANTITY))
def test_quantity(name: str) -> None:
    """quantity_test.go TestQuantity, case `name`."""
    check(*QUANTITY[name])


@pytest.mark.parametrize("name", sorted(SEMVER))
def test_semver(name: str) -> None:
    """semver_test.go TestSemver, case `name`."""
    check(*SEMVER[name])


@pytest.mark.parametrize(("expression", "expected"), [
    ('sign(quantity("-1m"))', -1),
    ('sign(quantity("0"))', 0),
    ('sign(quantity("5Gi"))', 1),
    ('quantity("1.5").isInteger()', False),
    ('quantity("8Ei").asApproximateFloat() == 9223372036854775807.0', True),  # binary values cap at 2^63-1
    ('quantity("1n").add(quantity("1n")) == quantity("2n")', True),
    ('quantity("1Gi").sub(quantity("1Gi")) == quantity("0")', True),
    ('quantity("1").compareTo(semver("1.0.0")) == 0', CelCompileError("found no matching overload for 'compareTo'")),
    ('quantity("1").add(1.5)', CelCompileError("found no matching overload for 'add'")),
    ('semver("1.0.0-alpha").isLessThan(semver("1.0.0"))', True),
    ('semver("1.0.0-alpha.1").isLessThan(semver("1.0.0-alpha.beta"))', True),
    ('semver("1.0.0-2").isLessThan(semver("1.0.0-10"))', True),
    ('semver("1.0.0-rc.1").compareTo(semver("1.0.0-rc.1+build.5"))', 0),
    ('semver("1.0.0+a") == semver("1.0.0+b")', True),
    ('semver("1.0.0-01")', CelRuntimeError('Numeric PreRelease version must not contain leading zeroes "01"')),
    ('semver("1.0", true).minor()', 0),
    ('semver("1.0-rc", true)', CelRuntimeError("short version cannot contain PreRelease/Build meta data")),
])
def test_quantity_and_semver_more(expression: str, expected: Any) -> None:
    check(expression, expected)


@pytest.mark.parametrize(("text", "expected"), [
    ("0", Fraction(0)),
    ("1", Fraction(1)),
    ("-1", Fraction(-1)),
    ("+1.5", Fraction(3, 2)),
    (".5", Fraction(1, 2)),
    ("1.", Fraction(1)),
    ("100m", Fraction(1, 10)),
    ("1Ki", Fraction(1024)),
    ("1.5Gi", Fraction(3 * 2**29)),
    ("80Gi", Fraction(80 * 2**30)),
    ("2e3", Fraction(2000)),
    ("2E-3", Fraction(2, 1000)),
    ("1e+3", Fraction(1000)),
    ("1k", Fraction(1000)),
    ("1n", Fraction(1, 10**9)),
    ("1u", Fraction(1, 10**6)),
    ("0.1n", Fraction(1, 10**9)),  # below a nano-unit: rounded up, away from zero
    ("-0.1n", Fraction(-1, 10**9)),
    ("1.0000000001", Fraction(10**9 + 1, 10**9)),
    ("16Ei", Fraction(2**63 - 1)),  # binary: capped at the int64 maximum
    ("16E", Fraction(16 * 10**18)),  # decimal: not capped
    ("-", Fraction(0)),
    # Upstream's fast path reads the scanned digits only: no digits at all is 0 there.
    ("Ki", Fraction(0)),
    (".", Fraction(0)),
    ("+.Mi", Fraction(0)),
])
def test_parse_quantity(text: str, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("", "quantities must match the regular expression"),
    ("1Mo", "quantities must match the regular expression"),
    ("1 ", "quantities must match the regular expression"),
    (" 1", "quantities must match the regular expression"),
    ("1..2", "quantities must match the regular expression"),
    ("1Mm", "unable to parse quantity's suffix"),
    ("1K", "unable to parse quantity's suffix"),
    ("1e", "unable to parse quantity's suffix"),
    (".e-10", "unable to parse numeric part of quantity"),  # the slow path (below nano) parses the text
])
def test_parse_quantity_errors(text: str, message: str) -> None:
    with pytest.raises(QuantityError) as failure:
        parse_quantity(text)
    assert message in str(failure.value)


def test_semver_precedence() -> None:
    """semver.org's example ordering, as blang's Compare gives it."""
    ordered = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11",
               "1.0.0-rc.1", "1.0.0", "2.0.0", "2.1.0", "2.1.1"]
    versions = [parse_semver(v) for v in ordered]
    for i, a in enumerate(versions):
        for j, b in enumerate(versions):
            assert compare(a, b) == (i > j) - (i < j), (ordered[i], ordered[j])
    with pytest.raises(SemverError, match="Invalid character"):
        parse_semver("1.0.0-a_b")


@pytest.mark.parametrize(("expression", "expected"), [
    # Kubernetes' Lists library (v0 in 1.36).
    ("[1, 2, 3].isSorted()", True),
    ("[1, 3, 2].isSorted()", False),
    ("['a', 'b'].isSorted() && [1.0, 2.0].isSorted() && [false, true].isSorted()", True),
    ("[1, 2, 3].sum() == 6 && [1.5, 2.5].sum() == 4.0", True),
    ("[1, 5, 3].min() == 1 && [1, 5, 3].max() == 5 && ['b', 'a'].min() == 'a' && [2.5, 1.5].max() == 2.5", True),
    ("[9223372036854775807, 1].sum() > 0", CelRuntimeError("integer overflow")),
    ("[1].sum() + 1 == 2", True),
    ("[0].min() + 1 == 1", True),
    ("dyn([]).min() == 1", CelRuntimeError("min called on empty list")),
    # ext.Sets.
    ("sets.contains([1, 2, 3], [3, 1])", True),
    ("sets.contains([1, 2], [4])", False),
    ("sets.contains([1, 2.0], [2])", True),  # numeric equality across types, as CEL's
    ("sets.equivalent([1, 2, 1], [2, 1])", True),
    ("sets.intersects(['a', 'b'], ['c', 'b'])", True),
    ("sets.intersects([quantity('1')], [quantity('1000m')])", True),
    ("sets.intersects([true], [1])", CelCompileError("found no matching overload for 'sets.intersects'")),
    # ext.Lists v3 (plain functions; first/last come with optional types).
    ("lists.range(4) == [0, 1, 2, 3]", True),
    ("[1, 2, 3, 4].slice(1, 3) == [2, 3]", True),
    ("[1, 2].slice(2, 1) == []", CelRuntimeError("cannot slice(2, 1), start index must be less than or equal")),
    ("[1, 2].slice(0, 3) == []", CelRuntimeError("cannot slice(0, 3), list is length 2")),
    ("[[1, 2], [3]].flatten() == [1, 2, 3]", True),
    ("[[1, [2]], [3]].flatten(2) == [1, 2, 3]", True),
    ("[3, 1, 2].sort() == [1, 2, 3] && ['b', 'a'].sort() == ['a', 'b']", True),
    ("[1, 2, 1, 3].distinct() == [1, 2, 3]", True),
    ("[1, 2, 3].reverse() == [3, 2, 1]", True),
    ("[1, 2].first().orValue(0) == 1 && [1, 2].last().orValue(0) == 2 && [].first().orValue(7) == 7", True),
])
def test_lists_and_sets(expression: str, expected: Any) -> None:
    check(expression, expected)


def test_library_in_selectors() -> None:
    """The functions through the public API, on a device."""
    from tests.unit.test_dra_cel import GPU  # the test device with 80Gi memory and driverVersion 550.54.15

    cache = SelectorCache()
    assert cache.compile('device.capacity["gpu.nvidia.com"].memory.sub(quantity("40Gi")).isGreaterThan('
                         'quantity("39Gi"))').matches(GPU) is True
    assert cache.compile('device.attributes["gpu.nvidia.com"].driverVersion.compareTo(semver("550.54.15")) '
                         '== 0').matches(GPU) is True
    assert cache.compile('sets.contains(["H100", "A100"], [device.attributes["gpu.nvidia.com"].productName])'
                         ).matches(GPU) is True
