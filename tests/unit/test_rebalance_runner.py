"""RebalanceRunner: carries out the rebalancer's verdicts (a fake Rebalancer and a fake Evictor here).

A dry run evicts nothing and writes nothing to the cluster; the Eviction API's answers map to outcomes the
rebalancer is told of; every verdict is an `eviction` record in the audit ring (skipped ones with why), an
Event on the pod and a metric; an unchanged verdict is recorded once.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry

from metrics_sched.audit import DecisionRing, EvictionRecord
from metrics_sched.observability.metrics import RebalanceMetrics
from metrics_sched.ports import ApiError
from metrics_sched.rebalance.model import EvictionVerdict, Verdict
from metrics_sched.rebalance.runner import RebalanceRunner
from metrics_sched.serving.decisions import decisions
from metrics_sched.supervision import Supervisor, Worker
from tests.polling import poll
from tests.unit.fakes import FakeAPI

pytestmark = pytest.mark.unit

HOT = EvictionVerdict(pod="ml/train-1", uid="u1", owner="ReplicaSet/ml/train", node="gpu-1", rule="hot-gpu",
                      verdict=Verdict.PLANNED, reason="gpu_temperature 91 > 85 for 6m; gpu-3 scores 72 vs 40 (+32)",
                      target="gpu-3", gain=32.0)
COOL = EvictionVerdict(pod="ml/train-2", uid="u2", owner="ReplicaSet/ml/train", node="gpu-1", rule="hot-gpu",
                       verdict=Verdict.SKIPPED, reason="gpu_temperature 91 > 85 for 6m; no node better by 10 points")


class FakeRebalancer:
    def __init__(self, *ticks: list[EvictionVerdict]) -> None:
        self.ticks = list(ticks)
        self.outcomes: list[tuple[str, Verdict]] = []
        self.candidates = 0
        self.calls = 0

    def tick(self) -> list[EvictionVerdict]:
        self.calls += 1
        verdicts = self.ticks.pop(0) if self.ticks else []
        self.candidates = len(verdicts)
        return verdicts

    def record_outcome(self, verdict: EvictionVerdict, outcome: Verdict) -> list[EvictionVerdict]:
        self.outcomes.append((verdict.pod, outcome))
        return []


class FakeEvictor:
    def __init__(self, *errors: ApiError | None) -> None:
        self.errors = list(errors)
        self.evicted: list[tuple[str, str, str]] = []

    def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool = False) -> None:
        self.evicted.append((namespace, name, uid))
        error = self.errors.pop(0) if self.errors else None
        if error is not None:
            raise error


def runner(rebalancer: FakeRebalancer, evictor: FakeEvictor, *, dry_run: bool,
           api: FakeAPI | None = None) -> tuple[RebalanceRunner, DecisionRing, RebalanceMetrics]:
    ring = DecisionRing(100)
    metrics = RebalanceMetrics(CollectorRegistry())
    return (RebalanceRunner(rebalancer, evictor, ring, dry_run=dry_run, writer=api or FakeAPI(), metrics=metrics,
                            controller="metrics-sched", instance="test", clock=lambda: 1000.0,
                            rules=("hot-gpu", "expensive")), ring, metrics)


def evictions(ring: DecisionRing, pod: str | None = None) -> list[EvictionRecord]:
    return [r for r in ring.select(kind="eviction", pod=pod) if isinstance(r, EvictionRecord)]


def count(metrics: RebalanceMetrics, rule: str, outcome: str) -> float:
    value = metrics.evictions.labels(rule, outcome)._value.get()
    return float(value)


def test_a_dry_run_evicts_nothing_writes_nothing_and_records_the_plan() -> None:
    api, evictor = FakeAPI(), FakeEvictor()
    rebalancer = FakeRebalancer([HOT, COOL])
    run, ring, metrics = runner(rebalancer, evictor, dry_run=True, api=api)
    done = run.tick()
    assert evictor.evicted == [] and api.events == []
    assert [v.verdict for v in done] == [Verdict.PLANNED, Verdict.SKIPPED]
    assert done[0].reason.startswith("dry run: would evict; ")
    assert rebalancer.outcomes == [("ml/train-1", Verdict.PLANNED)]  # the rebalancer hears of the plan too
    records = {r.pod: r for r in evictions(ring)}
    assert records["ml/train-1"].verdict == "planned" and records["ml/train-1"].target == "gpu-3"
    assert records["ml/train-2"].verdict == "skipped" and "no node better" in records["ml/train-2"].reason
    assert count(metrics, "hot-gpu", "planned") == 1 and count(metrics, "hot-gpu", "evicted") == 0
    assert metrics.candidates._value.get() == 2


def test_an_eviction_is_carried_out_recorded_reported_and_counted() -> None:
    api, evictor = FakeAPI(), FakeEvictor()
    rebalancer = FakeRebalancer([HOT, COOL])
    run, ring, metrics = runner(rebalancer, evictor, dry_run=False, api=api)
    done = run.tick()
    assert evictor.evicted == [("ml", "train-1", "u1")]
    assert rebalancer.outcomes == [("ml/train-1", Verdict.EVICTED)]
    assert [(v.pod, v.verdict) for v in done] == [("ml/train-1", Verdict.EVICTED), ("ml/train-2", Verdict.SKIPPED)]
    [evicted] = evictions(ring, "ml/train-1")
    assert evicted.as_dict() == {
        "kind": "eviction", "id": evicted.id, "time": 1000.0, "pod": "ml/train-1", "uid": "u1",
        "owner": "ReplicaSet/ml/train", "node": "gpu-1", "rule": "hot-gpu", "verdict": "evicted",
        "reason": HOT.reason, "target": "gpu-3", "gain": 32.0, "gang": None}
    assert [(e.pod_name, e.type, e.reason, e.action) for e in api.events] == [
        ("train-1", "Normal", "Evicted", "Rebalance"), ("train-2", "Normal", "EvictionSkipped", "Rebalance")]
    assert "rule hot-gpu on node gpu-1" in api.events[0].note and "gpu-3 (+32.0)" in api.events[0].note
    assert "no node better by 10 points" in api.events[1].note
    assert {e.reporting_controller for e in api.events} == {"metrics-sched"}
    assert count(metrics, "hot-gpu", "evicted") == 1 and count(metrics, "hot-gpu", "skipped") == 1
    assert count(metrics, "expensive", "evicted") == 0  # every configured rule shows, 0 until it fires


@pytest.mark.parametrize(("error", "outcome", "event"), [
    (ApiError(429, "Cannot evict pod as it would violate the pod's disruption budget.", reason="TooManyRequests"),
     Verdict.BLOCKED, "EvictionBlocked"),
    (ApiError(404, 'pods "train-1" not found'), Verdict.GONE, None),
    (ApiError(409, "Precondition failed: UID in precondition: u1, UID in object meta: u9"), Verdict.GONE, None),
    (ApiError(500, "etcdserver: request timed out"), Verdict.ERROR, "EvictionFailed"),
    (ApiError(None, "connection reset"), Verdict.ERROR, "EvictionFailed"),
])
def test_the_eviction_apis_answers_map_to_outcomes(error: ApiError, outcome: Verdict, event: str | None) -> None:
    api = FakeAPI()
    rebalancer = FakeRebalancer([HOT])
    run, ring, metrics = runner(rebalancer, FakeEvictor(error), dry_run=False, api=api)
    [done] = run.tick()
    assert done.verdict == outcome and rebalancer.outcomes == [("ml/train-1", outcome)]
    # Why, then the rebalancer's own case.
    why = error.message if outcome in (Verdict.BLOCKED, Verdict.ERROR) else f"({error.status}"
    assert why in done.reason and done.reason.endswith(HOT.reason)
    [record] = evictions(ring)
    assert record.verdict == outcome.value and record.reason == done.reason
    assert [e.reason for e in api.events] == ([event] if event else [])
    if event:
        assert api.events[0].type == "Warning"
    assert count(metrics, "hot-gpu", outcome.value) == 1


def test_an_unchanged_verdict_is_recorded_and_reported_once_but_counted_every_tick() -> None:
    api = FakeAPI()
    blocked = ApiError(429, "disruption budget")
    rebalancer = FakeRebalancer([HOT, COOL], [HOT, COOL], [replace(COOL, target="gpu-2", gain=3.0)], [HOT])
    run, ring, metrics = runner(rebalancer, FakeEvictor(blocked, blocked, None), dry_run=False, api=api)
    for _ in range(4):
        run.tick()
    verdicts = [(r.pod, r.verdict) for r in reversed(evictions(ring))]
    assert verdicts == [("ml/train-1", "blocked"), ("ml/train-2", "skipped"),  # tick 1
                        # tick 2: the same again, nothing new; tick 3: train-2's verdict changed (a target now)
                        ("ml/train-2", "skipped"),
                        ("ml/train-1", "evicted")]  # tick 4: train-1 was not in tick 3, and it is evicted now
    assert [e.reason for e in api.events] == ["EvictionBlocked", "EvictionSkipped", "EvictionSkipped", "Evicted"]
    assert count(metrics, "hot-gpu", "blocked") == 2 and count(metrics, "hot-gpu", "skipped") == 3


def test_an_event_that_cannot_be_written_loses_nothing_else() -> None:
    class FailingWriter(FakeAPI):
        def record_event(self, *args: object, **kwargs: object) -> str:
            raise ApiError(403, "events is forbidden")

    rebalancer = FakeRebalancer([HOT])
    run, ring, metrics = runner(rebalancer, FakeEvictor(), dry_run=False, api=FailingWriter())
    [done] = run.tick()
    assert done.verdict == Verdict.EVICTED and len(evictions(ring)) == 1
    assert count(metrics, "hot-gpu", "evicted") == 1


def test_eviction_records_share_the_ring_and_the_endpoint_filters_by_kind() -> None:
    run, ring, _ = runner(FakeRebalancer([HOT, COOL]), FakeEvictor(), dry_run=True)
    run.tick()
    status, _, body = decisions(ring, {"kind": ["eviction"], "pod": ["ml/train-2"]})
    answer = json.loads(body if isinstance(body, bytes) else b"".join(body))
    assert status == 200 and [d["verdict"] for d in answer["decisions"]] == ["skipped"]
    assert answer["decisions"][0]["kind"] == "eviction"
    assert ring.select(kind="placement") == [] and ring.query() == []


def test_serve_ticks_on_the_leader_only_and_survives_a_failing_tick() -> None:
    class Exploding(FakeRebalancer):
        def tick(self) -> list[EvictionVerdict]:
            super().tick()
            raise RuntimeError("boom")

    leading = threading.Event()
    asked = [0]

    def is_leader() -> bool:
        asked[0] += 1
        return leading.is_set()

    rebalancer = Exploding()
    run, _, _ = runner(rebalancer, FakeEvictor(), dry_run=True)
    supervisor, stop = Supervisor(), threading.Event()
    thread = threading.Thread(target=run.serve, args=(stop, 0.01),
                              kwargs={"is_leader": is_leader, "supervisor": supervisor})
    thread.start()
    try:
        poll(lambda: asked[0] >= 3, timeout=5, what="three intervals as a follower")
        assert rebalancer.calls == 0  # not the leader: no tick
        leading.set()
        poll(lambda: supervisor.failure_counts()[Worker.REBALANCER] >= 2, timeout=5, what="ticks after a failure")
    finally:
        stop.set()
        thread.join(timeout=5)
    assert not thread.is_alive() and supervisor.healthy()


def test_an_eviction_is_recorded_as_of_before_its_call_and_before_the_next_one() -> None:
    # The evicted pod's replacement can be created and placed while the call returns, or while the tick's next
    # evictions run: explain looks for the owner's placements since the eviction's record.
    now = [1000.0]
    ring = DecisionRing(100)
    recorded_before_call: list[int] = []

    class SlowEvictor(FakeEvictor):
        def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool = False) -> None:
            recorded_before_call.append(len(evictions(ring)))
            super().evict(namespace, name, uid)
            now[0] += 1.0

    other = replace(HOT, pod="ml/other-1", uid="u3", owner="ReplicaSet/ml/other")
    run = RebalanceRunner(FakeRebalancer([HOT, other]), SlowEvictor(), ring, dry_run=False, writer=FakeAPI(),
                          clock=lambda: now[0])
    run.tick()
    first, second = sorted(evictions(ring), key=lambda r: r.id)
    assert (first.pod, first.verdict, first.time) == ("ml/train-1", "evicted", 1000.0)
    assert (second.pod, second.verdict, second.time) == ("ml/other-1", "evicted", 1001.0)
    assert recorded_before_call == [0, 1]
