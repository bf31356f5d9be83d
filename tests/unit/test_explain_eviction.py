"""`explain` for a pod the rebalancer looked at: why it was moved (or left), and where its replacement went,
read from a real /decisions endpoint over a ring holding placements and evictions."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from metrics_sched.app.cli import main
from metrics_sched.app.cli.explain_cmd import render_eviction
from metrics_sched.audit import DecisionRecord, DecisionRing, build_record, new_eviction_record
from metrics_sched.serving.decisions import decisions
from metrics_sched.serving.http_server import HTTPServer
from tests.unit.fakes import node, pod
from tests.unit.test_telemetry_scoring import make

pytestmark = pytest.mark.unit

OWNER = "ReplicaSet/ml/train-7d9"
REASON = "gpu_temperature 91 > 85 for 6m; gpu-3 scores 72 vs 40 here (+32)"


def owned_pod(name: str) -> dict[str, Any]:
    body = pod(name, namespace="ml")
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "train-7d9", "uid": "rs-uid", "controller": True}]
    return body


def placement(name: str, node_name: str) -> DecisionRecord:
    scheduler, api, _ = make()
    scheduler.handlers.on_node_event("ADDED", node(node_name))
    api.add_pod(owned_pod(name))
    result = scheduler.schedule_one(timeout=1)
    assert result is not None and result.node == node_name
    return build_record(result, scheduler.state.table, config_hash="h")


def test_a_placement_record_carries_the_owner_as_the_rebalancer_keys_it() -> None:
    record = placement("train-7d9-a", "gpu-1")
    assert record.owner == OWNER and record.as_dict()["owner"] == OWNER and record.as_dict()["kind"] == "placement"
    ring = DecisionRing(10)
    stored = ring.add(record)
    assert stored.owner == OWNER and stored.as_dict() == record.as_dict() and stored.to_record() == record


def eviction(verdict: str, *, pod_name: str = "ml/train-7d9-a", uid: str = "uid-a", now: float = 2000.0,
             target: str | None = "gpu-3", gain: float | None = 32.0, reason: str = REASON) -> dict[str, object]:
    return new_eviction_record(pod=pod_name, uid=uid, owner=OWNER, node="gpu-1", rule="hot-gpu", verdict=verdict,
                               reason=reason, target=target, gain=gain, now=now).as_dict()


def test_render_an_evicted_pod_and_its_replacement() -> None:
    replacement = {"pod": "ml/train-7d9-b", "node": "gpu-3", "result": "scheduled", "id": 99, "time": 2001.0}
    text = render_eviction(eviction("evicted"), replacement)
    assert "rule hot-gpu" in text
    assert "result: evicted on node gpu-1 (best other node gpu-3, +32.0 points)" in text
    assert f"why: {REASON}" in text
    assert "then: its replacement ml/train-7d9-b went to gpu-3" in text and "decision #99" in text
    assert "no placement" in render_eviction(eviction("evicted"), None)


def test_render_a_skipped_pod_says_why_and_no_follow_up() -> None:
    text = render_eviction(eviction("skipped", target=None, gain=None, reason="no node better by 10 points"), None)
    assert "result: skipped on node gpu-1\n" in text + "\n" and "why: no node better by 10 points" in text
    assert "then:" not in text


@pytest.fixture
def served() -> Iterator[tuple[DecisionRing, str]]:
    ring = DecisionRing(100)
    server = HTTPServer("127.0.0.1", 0)
    server.route("/decisions", lambda query: decisions(ring, query))
    server.start()
    try:
        yield ring, f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


def test_explain_follows_an_evicted_pod_to_its_replacement(served: tuple[DecisionRing, str],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    ring, url = served
    first = placement("train-7d9-a", "gpu-1")
    ring.add(dataclasses.replace(first, time=1000.0))
    evicted = new_eviction_record(pod="ml/train-7d9-a", uid=first.uid, owner=OWNER, node="gpu-1", rule="hot-gpu",
                                  verdict="evicted", reason=REASON, target="gpu-3", gain=32.0, now=2000.0)
    ring.add_eviction(evicted)
    unrelated = placement("other-1", "gpu-2")
    ring.add(dataclasses.replace(unrelated, time=2000.5, owner="ReplicaSet/ml/other"))
    second = placement("train-7d9-b", "gpu-3")
    ring.add(dataclasses.replace(second, time=2001.0))
    third = placement("train-7d9-c", "gpu-2")  # a later scale-up of the same owner: not the replacement
    ring.add(dataclasses.replace(third, time=2100.0))

    assert main(["explain", "ml/train-7d9-a", "--url", url]) == 0
    out = capsys.readouterr().out
    assert f"rebalancer verdict #{evicted.id}" in out and f"why: {REASON}" in out
    assert "then: its replacement ml/train-7d9-b went to gpu-3" in out and f"decision #{second.id}" in out
    assert "train-7d9-c" not in out

    # --all: the eviction, then the pod's own placement before it.
    assert main(["explain", "ml/train-7d9-a", "--url", url, "--all"]) == 0
    out = capsys.readouterr().out
    assert out.index("rebalancer verdict") < out.index(f"decision #{first.id}")


def test_explain_finds_a_replacement_placed_while_the_eviction_call_returned(
        served: tuple[DecisionRing, str], capsys: pytest.CaptureFixture[str]) -> None:
    # The runner stamps the record before the eviction call and takes its id after: the replacement's placement
    # can come in between (an earlier id, a later time).
    ring, url = served
    ring.add(dataclasses.replace(placement("train-7d9-a", "gpu-1"), time=1000.0))
    second = placement("train-7d9-b", "gpu-3")
    ring.add(dataclasses.replace(second, time=2000.2))
    evicted = new_eviction_record(pod="ml/train-7d9-a", uid="uid-train-7d9-a", owner=OWNER, node="gpu-1",
                                  rule="hot-gpu", verdict="evicted", reason=REASON, target="gpu-3", gain=32.0,
                                  now=2000.0)
    ring.add_eviction(evicted)
    assert evicted.id > second.id
    assert main(["explain", "ml/train-7d9-a", "--url", url]) == 0
    out = capsys.readouterr().out
    assert "then: its replacement ml/train-7d9-b went to gpu-3" in out and f"decision #{second.id}" in out


def test_explain_a_pod_the_rebalancer_left_shows_why_and_its_placement(served: tuple[DecisionRing, str],
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    ring, url = served
    first = placement("train-7d9-a", "gpu-1")
    ring.add(first)
    ring.add_eviction(new_eviction_record(pod="ml/train-7d9-a", uid=first.uid, owner=OWNER, node="gpu-1",
                                          rule="hot-gpu", verdict="skipped", reason="no node better by 10 points",
                                          target=None, gain=None))
    assert main(["explain", "ml/train-7d9-a", "--url", url]) == 0
    out = capsys.readouterr().out
    assert "result: skipped on node gpu-1" in out and "no node better by 10 points" in out
    assert f"decision #{first.id}" in out and "result: scheduled -> gpu-1" in out
