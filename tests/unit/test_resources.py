"""Quantity parsing and pod request accounting, checked against Kubernetes' own rules."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from metrics_sched.model.quantity import QuantityError, parse_quantity, to_int, to_milli
from metrics_sched.model.resources import DEFAULT_MEMORY_REQUEST, pod_requests


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", Fraction(1)), ("100m", Fraction(1, 10)), ("1.5", Fraction(3, 2)), ("0.1", Fraction(1, 10)),
        ("287982098n", Fraction(287982098, 10**9)), ("5u", Fraction(5, 10**6)), ("1k", Fraction(1000)),
        ("1Ki", Fraction(1024)), ("1156520Ki", Fraction(1156520 * 1024)), ("1.5Gi", Fraction(3 * 2**29)),
        ("2M", Fraction(2 * 10**6)), ("1e3", Fraction(1000)), ("1E-3", Fraction(1, 1000)), (".5", Fraction(1, 2)),
        ("+2", Fraction(2)), ("1Ei", Fraction(2**60)), (3, Fraction(3)), (0.25, Fraction(1, 4)),
    ],
)
def test_parse_quantity(text: str, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("bad", ["", "abc", "1.2.3", "1Kb", "1 Gi", "--1", "1e", "e3", "1ki", "Gi", "nan", "inf"])
def test_malformed_quantities_are_rejected(bad: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(bad)


def test_rounding_is_up_like_the_api() -> None:
    assert to_milli("0.0001") == 1  # MilliValue rounds up
    assert to_milli("100m") == 100
    assert to_int("1.5") == 2
    assert to_milli("0.1") + to_milli("0.2") == 300


def c(name: str, restart: str | None = None, **req: str) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "resources": {"requests": dict(req)}}
    if restart:
        container["restartPolicy"] = restart
    return container


def pod(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": containers, "initContainers": init or [], **spec}}


# Cases from k8s.io/component-helpers/resource/helpers_test.go (TestPodResourceRequests), in our units.
CASES = [
    ("containers add up", pod([c("a", cpu="1"), c("b", cpu="2")]), {"cpu": 3000}),
    ("init container larger than sum", pod([c("a", cpu="1")], [c("i", cpu="4")]), {"cpu": 4000}),
    ("init container smaller than sum", pod([c("a", cpu="2"), c("b", cpu="2")], [c("i", cpu="3")]), {"cpu": 4000}),
    ("sidecar adds to containers", pod([c("a", cpu="1")], [c("s", "Always", cpu="1")]), {"cpu": 2000}),
    (
        "init after sidecar carries the sidecar",
        pod([c("a", cpu="1")], [c("s", "Always", cpu="1"), c("i", cpu="3")]),
        {"cpu": 4000},
    ),
    (
        "init before sidecar does not",
        pod([c("a", cpu="1")], [c("i", cpu="3"), c("s", "Always", cpu="1")]),
        {"cpu": 3000},
    ),
    (
        "several sidecars accumulate",
        pod([c("a", cpu="1")], [c("s1", "Always", cpu="1"), c("i", cpu="1"), c("s2", "Always", cpu="2")]),
        {"cpu": 4000},
    ),
    ("overhead is added", pod([c("a", cpu="1", memory="1Gi")], overhead={"cpu": "250m", "memory": "120Mi"}),
     {"cpu": 1250, "memory": 2**30 + 120 * 2**20}),
    ("pod-level requests replace cpu/memory",
     pod([c("a", cpu="1", memory="1Gi")], resources={"requests": {"cpu": "3"}}), {"cpu": 3000, "memory": 2**30}),
    ("extended resources", pod([c("a", **{"nvidia.com/gpu": "2"})], [c("i", **{"nvidia.com/gpu": "1"})]),
     {"nvidia.com/gpu": 2}),
]


@pytest.mark.parametrize(("name", "spec", "expected"), CASES, ids=[case[0] for case in CASES])
def test_pod_requests(name: str, spec: dict[str, Any], expected: dict[str, int]) -> None:
    assert pod_requests(spec) == {**expected, "pods": 1}


def test_non_zero_defaults_apply_per_container_for_scoring() -> None:
    requests = pod_requests(pod([c("a"), c("b", cpu="1")]), non_zero=True)
    assert requests["cpu"] == 1100
    assert requests["memory"] == 2 * DEFAULT_MEMORY_REQUEST


def test_malformed_request_names_the_field() -> None:
    with pytest.raises(QuantityError, match=r"spec.containers\[1\].resources.requests\[cpu\]"):
        pod_requests(pod([c("a", cpu="1"), c("b", cpu="lots")]))


def test_a_pods_amounts_are_added_exactly_and_rounded_once() -> None:
    half = {"resources": {"requests": {"memory": "536870912500m"}}}  # 536870912.5 bytes
    pod = {"spec": {"containers": [half, half]}}
    assert pod_requests(pod)["memory"] == 1073741825  # kube-scheduler: ceil(2 x 536870912.5), not 2 x ceil
