"""parse_pod shares what replicas have in common (their requests' parse, their toleration objects) without the
pods sharing anything mutable, and without a malformed pod ever borrowing a well-formed one's answer; pods
waiting in the queue share their repeated strings."""

from __future__ import annotations

import copy
from typing import Any

import orjson

from metrics_sched.model import podinfo
from metrics_sched.model.podinfo import Toleration, parse_pod, share_strings
from metrics_sched.model.resources import pod_requests
from tests.unit.fakes import pod as fake_pod
from tests.unit.test_telemetry_scoring import make


def replica(i: int, cpu: Any = "250m", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": f"web-{i}", "namespace": "ns", "uid": f"u{i}"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}},
                                    {"name": "side"}],
                     "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                      "effect": "NoExecute", "tolerationSeconds": 300}], **spec}}


def test_replicas_get_the_requests_a_fresh_parse_gives_in_dicts_of_their_own() -> None:
    first, second = parse_pod(replica(1)), parse_pod(replica(2))
    assert first.requests == second.requests == pod_requests(replica(3)) == {"cpu": 250, "memory": 2**30, "pods": 1}
    assert first.non_zero_requests == pod_requests(replica(3), non_zero=True)
    assert first.non_zero_requests["cpu"] == 350  # the sidecar without requests counts as 100m when scoring
    first.requests["cpu"] = 1  # a caller's change stays in its pod
    assert second.requests["cpu"] == 250 and parse_pod(replica(4)).requests["cpu"] == 250


def test_what_the_shortcut_skips_is_still_counted() -> None:
    init = replica(1, initContainers=[{"name": "i", "resources": {"requests": {"cpu": "2"}}}])
    overhead = replica(2, overhead={"cpu": "100m"})
    for pod in (init, overhead):
        assert parse_pod(pod).requests == pod_requests(pod)
    assert parse_pod(init).requests["cpu"] == 2000 and parse_pod(overhead).requests["cpu"] == 350


def test_a_malformed_quantity_is_refused_even_after_a_well_formed_twin() -> None:
    assert parse_pod(replica(1, cpu="1")).parse_error is None
    for bad in (True, "1 core"):
        info = parse_pod(replica(2, cpu=bad))
        assert info.parse_error is not None and info.requests == {}, bad


def test_replicas_share_their_toleration_objects_and_malformed_ones_are_parsed_alone() -> None:
    first, second = parse_pod(replica(1)), parse_pod(replica(2))
    assert first.tolerations is second.tolerations
    assert first.tolerations == (Toleration("node.kubernetes.io/not-ready", "Exists", None, "NoExecute"),)
    odd = replica(3)
    odd["spec"]["tolerations"] = [{"key": "k", "operator": "Equal", "value": ["not", "a", "string"]}]
    value: object = parse_pod(odd).tolerations[0].value
    assert value == ["not", "a", "string"]
    assert parse_pod(copy.deepcopy(odd)).tolerations is not parse_pod(odd).tolerations


def test_the_caches_start_over_when_full(monkeypatch: Any) -> None:
    monkeypatch.setattr(podinfo, "MAX_REQUEST_SHAPES", 2)
    monkeypatch.setattr(podinfo, "MAX_TOLERATION_LISTS", 2)
    monkeypatch.setattr(podinfo, "_REQUESTS", {})  # what earlier tests left is not this test's
    monkeypatch.setattr(podinfo, "_TOLERATIONS", {})
    for i in range(5):
        pod = replica(i, cpu=f"{i + 1}")
        pod["spec"]["tolerations"][0]["tolerationSeconds"] = i  # not part of the parse: the same list
        pod["spec"]["tolerations"][0]["key"] = f"k{i}"
        info = parse_pod(pod)
        assert info.requests["cpu"] == (i + 1) * 1000 and info.tolerations[0].key == f"k{i}"
        assert len(podinfo._REQUESTS) <= 2 and len(podinfo._TOLERATIONS) <= 2


def decoded(pod: dict[str, Any]) -> dict[str, Any]:
    """As the watch delivers it: every string its own object."""
    return orjson.loads(orjson.dumps(pod))  # type: ignore[no-any-return]


def test_waiting_pods_share_their_repeated_strings_and_keep_their_own_names() -> None:
    first, second = decoded(replica(1)), decoded(replica(2))
    before = copy.deepcopy(first)
    first["metadata"]["labels"] = {"app": "web"}
    second["metadata"]["labels"] = {"app": "web"}
    before["metadata"]["labels"] = {"app": "web"}
    share_strings(first)
    share_strings(second)
    assert first == before  # the same values
    assert first["metadata"]["namespace"] is second["metadata"]["namespace"]
    assert first["metadata"]["labels"]["app"] is second["metadata"]["labels"]["app"]
    memory = [c["resources"]["requests"]["memory"] for c in (first["spec"]["containers"][0],
                                                             second["spec"]["containers"][0])]
    assert memory[0] is memory[1]
    assert first["spec"]["tolerations"][0]["key"] is second["spec"]["tolerations"][0]["key"]
    assert first["metadata"]["name"] != second["metadata"]["name"]
    info = parse_pod(second)
    assert info.namespace is first["metadata"]["namespace"]


def test_the_shared_strings_table_is_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(podinfo, "MAX_SHARED_STRINGS", 10)
    for i in range(50):
        share_strings(decoded(replica(i, cpu=f"{i + 1}m")))
        assert len(podinfo._STRINGS) <= 10 + 20  # one pod's values at most beyond the bound before it starts over
    long = "x" * (podinfo.SHARED_STRING_MAX + 1)
    pod = decoded(replica(1))
    pod["spec"]["containers"][0]["image"] = long
    share_strings(pod)
    assert long not in podinfo._STRINGS


def test_the_event_handlers_share_the_strings_of_the_pods_they_queue() -> None:
    scheduler, _, _ = make()
    first, second = decoded(fake_pod("a", namespace="team-a")), decoded(fake_pod("b", namespace="team-a"))
    scheduler.handlers.on_pod_event("ADDED", first)
    scheduler.handlers.on_pod_event("ADDED", second)
    assert first["metadata"]["namespace"] is second["metadata"]["namespace"]
    assert first["spec"]["containers"][0]["name"] is second["spec"]["containers"][0]["name"]
