"""The framework's cycle, extension point by extension point, with its failure paths: whatever fails after
assume (Reserve, Permit, PreBind, Bind) runs Unreserve in reverse, un-assumes the pod and requeues it
with backoff; a Bind plugin's status is honoured; Permit can hold a pod until another thread decides."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import pytest

from metrics_sched.framework import (
    SUCCESS,
    ArgsError,
    BindOutcomeKind,
    BindPlugin,
    BindStatus,
    Code,
    CycleState,
    Filtered,
    FilterPlugin,
    NodeTable,
    PermitPlugin,
    PodInfo,
    PostBindPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreFilterPlugin,
    PreScorePlugin,
    ReservePlugin,
    ScorePlugin,
    StateKey,
    Status,
    parse_args,
)
from metrics_sched.framework.runtime import CycleResult, Framework
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.plugins import in_tree_registry
from metrics_sched.plugins.default_binder.plugin import REREAD_ATTEMPTS, DefaultBinder
from metrics_sched.ports import ApiError
from metrics_sched.scheduler import Scheduler
from metrics_sched.state.node_table import parse_node
from tests.polling import poll
from tests.schedulers import make_scheduler
from tests.unit.fakes import FakeAPI, node, pod
from tests.unit.test_scheduler import drain

pytestmark = pytest.mark.unit

CALLS: list[str] = []


class Step(ReservePlugin, PermitPlugin, PreBindPlugin, BindPlugin, PostBindPlugin):
    """Records every call; `fail` names the extension point where it fails and how."""

    name = "Step"
    fail: ClassVar[dict[str, Status | Exception]] = {}
    permit_wait: ClassVar[float | None] = None
    hold_label: ClassVar[str | None] = None  # when set, only pods with this label wait at Permit
    pre_bind_hook: ClassVar[Callable[[PodInfo], None] | None] = None
    bind_codes: ClassVar[list[Status]] = []  # statuses Bind returns in turn before succeeding

    def _maybe_fail(self, point: str) -> Status:
        CALLS.append(f"{self.name}.{point}")
        outcome = self.fail.get(point, SUCCESS)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def reserve(self, cycle: CycleState, pod: PodInfo, node: str) -> Status:
        return self._maybe_fail("reserve")

    def unreserve(self, cycle: CycleState, pod: PodInfo, node: str) -> None:
        CALLS.append(f"{self.name}.unreserve")

    def permit(self, cycle: CycleState, pod: PodInfo, node: str) -> tuple[Status, float]:
        status = self._maybe_fail("permit")
        if not status.ok:
            return status, 0.0
        if self.permit_wait is not None and (self.hold_label is None or self.hold_label in pod.labels):
            return Status.wait("held"), self.permit_wait
        return SUCCESS, 0.0

    def pre_bind(self, cycle: CycleState, pod: PodInfo, node: str) -> Status:
        if Step.pre_bind_hook is not None:
            Step.pre_bind_hook(pod)
        return self._maybe_fail("pre_bind")

    def bind(self, cycle: CycleState, pod: PodInfo, node: str) -> Status:
        if self.bind_codes:
            CALLS.append("Step.bind")
            return self.bind_codes.pop(0)
        return self._maybe_fail("bind")

    def post_bind(self, cycle: CycleState, pod: PodInfo, node: str) -> None:
        CALLS.append(f"{self.name}.post_bind")


class Second(ReservePlugin):
    name = "Second"

    def reserve(self, cycle: CycleState, pod: PodInfo, node: str) -> Status:
        CALLS.append("Second.reserve")
        return SUCCESS

    def unreserve(self, cycle: CycleState, pod: PodInfo, node: str) -> None:
        CALLS.append("Second.unreserve")


@pytest.fixture(autouse=True)
def reset() -> Any:
    CALLS.clear()
    Step.fail = {}
    Step.permit_wait = None
    Step.hold_label = None
    Step.pre_bind_hook = None
    Step.bind_codes = []
    yield


def make(*, binder: str = "Step") -> tuple[Scheduler, FakeAPI]:
    config = {"profiles": [{"plugins": {
        "reserve": {"enabled": [{"name": "Step"}, {"name": "Second"}]},
        "permit": {"enabled": [{"name": "Step"}]},
        "preBind": {"enabled": [{"name": "Step"}]},
        "bind": {"disabled": [{"name": "*"}], "enabled": [{"name": binder}]},
        "postBind": {"enabled": [{"name": "Step"}]},
    }}]}
    api = FakeAPI()
    scheduler = make_scheduler(config, api, plugins=[Step, Second])
    scheduler.handlers.on_node_event("ADDED", node("n0"))
    return scheduler, api


def unreserved_in_reverse() -> bool:
    return CALLS[-2:] == ["Second.unreserve", "Step.unreserve"]


def assert_unwound_and_backing_off(scheduler: Scheduler, api: FakeAPI) -> None:
    assert unreserved_in_reverse(), CALLS
    assert scheduler.state.assumed_count() == 0 and not scheduler.state.is_placed(next(iter(api.pods.values()))[
        "metadata"]["uid"])
    assert scheduler.queue.lengths()["backoff"] == 1
    assert api.binds == []
    assert "Step.post_bind" not in CALLS


def test_the_cycle_runs_every_point_in_kube_scheduler_order() -> None:
    scheduler, api = make()
    api.add_pod(pod("p"))
    drain(scheduler, api)
    assert CALLS == ["Step.reserve", "Second.reserve", "Step.permit", "Step.pre_bind", "Step.bind", "Step.post_bind"]
    # Step's Bind succeeded without calling the API: the bind plugin's own status is what counts.
    assert scheduler.queue.lengths() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0}
    assert scheduler.state.assumed_count() == 1


@pytest.mark.parametrize("point", ["reserve", "pre_bind", "bind"])
def test_an_error_after_assume_unreserves_un_assumes_and_backs_off(point: str) -> None:
    scheduler, api = make()
    Step.fail = {point: Status.error(f"{point} broke")}
    api.add_pod(pod("p"))
    scheduler.schedule_one(timeout=1)
    assert scheduler.binder.drain(5)
    assert_unwound_and_backing_off(scheduler, api)
    assert scheduler.reporter.wait_idle(5)
    [event] = api.events_for("default/p", "FailedScheduling")
    assert f"{point} broke" in event.note


@pytest.mark.parametrize("point", ["reserve", "permit", "pre_bind", "bind"])
def test_a_plugin_that_raises_is_an_error_status_not_a_crash(point: str) -> None:
    scheduler, api = make()
    Step.fail = {point: RuntimeError(f"{point} raised")}
    api.add_pod(pod("p"))
    scheduler.schedule_one(timeout=1)
    assert scheduler.binder.drain(5)
    assert_unwound_and_backing_off(scheduler, api)


def test_permit_reject_unreserves_and_parks_the_pod_as_unschedulable() -> None:
    scheduler, api = make()
    Step.fail = {"permit": Status.unschedulable("not now")}
    api.add_pod(pod("p"))
    result = scheduler.schedule_one(timeout=1)
    assert result is not None and result.status.code == Code.UNSCHEDULABLE and result.status.plugin == "Step"
    assert unreserved_in_reverse()
    assert scheduler.state.assumed_count() == 0
    assert scheduler.queue.lengths()["unschedulable"] == 1
    assert scheduler.reporter.wait_idle(5)
    [event] = api.events_for("default/p", "FailedScheduling")
    assert event.note == "Step: not now"


def test_bind_all_skip_or_failure_is_not_recorded_as_bound() -> None:
    scheduler, api = make()
    outcomes: list[BindOutcomeKind] = []
    scheduler.bind_observers.append(lambda outcome, _: outcomes.append(outcome.result))
    Step.fail = {"bind": Status(Code.SKIP)}
    api.add_pod(pod("p"))
    scheduler.schedule_one(timeout=1)
    assert scheduler.binder.drain(5)
    assert outcomes == [BindOutcomeKind.ERROR]
    assert_unwound_and_backing_off(scheduler, api)
    assert scheduler.reporter.wait_idle(5)
    assert api.events_for("default/p", "Scheduled") == []


def test_bind_outcome_unknown_keeps_the_pod_assumed_and_binds_again_later(monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler, api = make(binder="DefaultBinder")
    monkeypatch.setattr(DefaultBinder, "reread_delay", 0.0)
    monkeypatch.setattr(scheduler.queue, "initial_backoff", 0.05)
    body = pod("p")
    api.add_pod(body)
    real_get = api.get_pod
    failures = iter(range(REREAD_ATTEMPTS))  # every re-read after the first bind fails: outcome unknown

    def flaky_get(namespace: str, name: str) -> Any:
        if next(failures, None) is not None:
            raise ApiError(None, "connection reset")
        return real_get(namespace, name)

    api.fail_next_binds.append(ApiError(None, "timeout"))
    monkeypatch.setattr(api, "get_pod", flaky_get)
    scheduler.schedule_one(timeout=1)
    deadline = time.monotonic() + 5
    while not api.binds and time.monotonic() < deadline:
        assert scheduler.state.is_placed(body["metadata"]["uid"])  # never forgotten while the outcome is unknown
        time.sleep(0.01)
    assert api.binds == [("default/p", "n0")]
    assert scheduler.binder.drain(5)
    assert "Step.unreserve" not in CALLS


def test_permit_wait_holds_the_pod_until_another_thread_allows_it() -> None:
    scheduler, api = make()
    Step.permit_wait = 30.0
    api.add_pod(pod("p"))
    result = scheduler.schedule_one(timeout=1)
    assert result is not None and result.status.code == Code.WAIT
    framework = scheduler.frameworks["metrics-sched"]
    [waiting] = list(framework.handle.waiting_pods)
    assert waiting.pending_plugins == {"Step"} and "Step.pre_bind" not in CALLS
    assert scheduler.state.assumed_count() == 1  # held pods keep their place
    threading.Thread(target=waiting.allow, args=("Step",)).start()
    poll(lambda: "Step.post_bind" in CALLS, 5, "the bind after allow", interval=0.01)
    assert scheduler.binder.drain(5)
    assert CALLS[-3:] == ["Step.pre_bind", "Step.bind", "Step.post_bind"]
    assert len(framework.handle.waiting_pods) == 0


def test_permit_wait_times_out_into_a_rejection() -> None:
    scheduler, api = make()
    Step.permit_wait = 0.05
    api.add_pod(pod("p"))
    result = scheduler.schedule_one(timeout=1)
    assert result is not None and result.status.code == Code.WAIT
    poll(lambda: scheduler.queue.lengths()["unschedulable"] == 1, 5, "the timed-out pod parked", interval=0.01)
    assert scheduler.queue.lengths()["unschedulable"] == 1
    assert unreserved_in_reverse() and scheduler.state.assumed_count() == 0
    assert scheduler.reporter.wait_idle(5)
    [event] = api.events_for("default/p", "FailedScheduling")
    assert "waited 0.05s at Permit" in event.note


class Nominate(PostFilterPlugin):
    name = "Nominate"

    def post_filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable,
                    rejections: Mapping[str, int]) -> tuple[PostFilterResult, Status]:
        what_if = self.handle.run_filters(cycle.clone(), pod)
        assert not what_if.feasible.any()
        assert "Insufficient nvidia.com/gpu" in rejections
        return PostFilterResult(table.name(int(np.flatnonzero(table.present)[0]))), SUCCESS


def test_post_filter_runs_when_nothing_fits_and_its_nomination_is_recorded() -> None:
    config = {"profiles": [{"plugins": {"postFilter": {"disabled": [{"name": "*"}],
                                                       "enabled": [{"name": "Nominate"}]}}}]}
    api = FakeAPI()
    scheduler = make_scheduler(config, api, plugins=[Nominate])
    scheduler.handlers.on_node_event("ADDED", node("n0", gpus=1))
    api.add_pod(pod("big", gpus=4))
    result = scheduler.schedule_one(timeout=1)
    assert result is not None and result.node is None and result.nominated_node == "n0"
    assert [t[:2] for t in result.timings if t[1] == "PostFilter"] == [("Nominate", "PostFilter")]


@dataclass
class Counter:
    n: int = 0

    def clone(self) -> Counter:
        return Counter(self.n)


def test_cycle_state_keys_are_typed_and_clone_copies_what_can_change() -> None:
    counter, frozen = StateKey[Counter]("t/counter"), StateKey[tuple[int, ...]]("t/frozen")
    state = CycleState()
    state.write(counter, Counter(1))
    state.write(frozen, (1, 2))
    copy = state.clone()
    copy.read(counter).n = 5
    assert state.read(counter).n == 1 and copy.read(frozen) is state.read(frozen)
    assert StateKey[Counter]("t/counter") not in state  # identity, not the name, matches
    with pytest.raises(KeyError, match="t/other was not written"):
        state.read(StateKey[int]("t/other"))


@dataclass(frozen=True)
class Inner:
    low: float = 0.0
    high: float = 1.0

    def validate(self) -> None:
        if not self.high > self.low:
            raise ArgsError("high", "must be greater than low")


@dataclass(frozen=True)
class Outer:
    metric_name: str
    items: tuple[Inner, ...] = ()
    labels: dict[str, int] = field(default_factory=dict)
    source: str = field(default="a", metadata={"key": "from"})


@pytest.mark.parametrize(("raw", "field_name", "message"), [
    ({}, "metricName", "is required"),
    ({"metricName": "m", "extra": 1}, "extra", "unknown field"),
    ({"metricName": "m", "items": [{}, {"low": 2, "high": 1}]}, "items[1].high", "greater than low"),
    ({"metricName": "m", "items": [{"low": "x"}]}, "items[0].low", "finite number"),
    ({"metricName": "m", "labels": {"a": True}}, "labels.a", "integer"),
    ({"metricName": ""}, "metricName", "non-empty"),
])
def test_args_errors_name_the_field(raw: dict[str, Any], field_name: str, message: str) -> None:
    with pytest.raises(ArgsError) as info:
        parse_args(Outer, raw)
    assert info.value.field == field_name and message in info.value.message


def test_args_parse_camel_case_keys_nested_and_renamed() -> None:
    parsed = parse_args(Outer, {"metricName": "m", "items": [{"high": 2}], "labels": {"a": 1}, "from": "b"})
    assert parsed == Outer("m", (Inner(0.0, 2.0),), {"a": 1}, "b")


def bind_once(scheduler: Scheduler, api: FakeAPI) -> list[BindOutcomeKind]:
    outcomes: list[BindOutcomeKind] = []
    scheduler.bind_observers.append(lambda outcome, _: outcomes.append(outcome.result))
    api.add_pod(pod("p"))
    scheduler.schedule_one(timeout=1)
    poll(lambda: bool(outcomes), 5, "a bind outcome", interval=0.01)
    return outcomes


def test_a_bind_status_that_contradicts_its_code_is_an_error_not_a_bind() -> None:
    scheduler, api = make()
    Step.bind_codes = [BindStatus(Code.ERROR, "boom", outcome=BindOutcomeKind.BOUND)]
    assert bind_once(scheduler, api) == [BindOutcomeKind.ERROR]
    assert scheduler.binder.drain(5)
    assert_unwound_and_backing_off(scheduler, api)


def test_a_plain_pending_from_bind_keeps_the_pod_assumed_and_retries_the_binding() -> None:
    scheduler, api = make()
    scheduler.queue.initial_backoff = 0.01
    Step.bind_codes = [Status(Code.PENDING, "no answer")]
    outcomes = bind_once(scheduler, api)
    assert outcomes == [BindOutcomeKind.UNKNOWN] and scheduler.state.assumed_count() == 1
    poll(lambda: len(outcomes) == 2, 5, "the second binding cycle", interval=0.01)
    assert outcomes[1] == BindOutcomeKind.BOUND and "Step.unreserve" not in CALLS
    assert CALLS.count("Step.pre_bind") == 2  # retried from PreBind (PreBind must be idempotent)


def test_unschedulable_from_prebind_parks_the_pod_with_that_plugin_as_rejector() -> None:
    scheduler, api = make()
    Step.fail = {"pre_bind": Status.unschedulable("volume not ready")}
    assert bind_once(scheduler, api) == [BindOutcomeKind.REJECTED]
    assert scheduler.binder.drain(5)
    assert unreserved_in_reverse() and scheduler.state.assumed_count() == 0
    assert scheduler.queue.lengths()["unschedulable"] == 1
    assert scheduler.reporter.wait_idle(5)
    [event] = api.events_for("default/p", "FailedScheduling")
    assert event.note == "Step: volume not ready"


@pytest.mark.parametrize(("point", "code"), [("reserve", Code.WAIT), ("reserve", Code.SKIP), ("pre_bind", Code.WAIT)])
def test_a_code_an_extension_point_may_not_return_is_an_error_and_loses_no_pod(point: str, code: Code) -> None:
    scheduler, api = make()
    Step.fail = {point: Status(code, "odd")}
    api.add_pod(pod("p"))
    scheduler.schedule_one(timeout=1)
    assert scheduler.binder.drain(5)
    assert_unwound_and_backing_off(scheduler, api)


def held(scheduler: Scheduler) -> Any:
    [waiting] = list(scheduler.waiting_pods)
    return waiting


def test_a_waiting_pod_rejected_from_another_thread_is_unwound_and_parked() -> None:
    scheduler, api = make()
    Step.permit_wait = 30.0
    api.add_pod(pod("p"))
    scheduler.schedule_one(timeout=1)
    threading.Thread(target=held(scheduler).reject, args=("Gang", "the gang broke up")).start()
    poll(lambda: scheduler.queue.lengths()["unschedulable"] == 1, 5, "the rejected pod parked", interval=0.01)
    assert unreserved_in_reverse() and scheduler.state.assumed_count() == 0
    assert len(scheduler.waiting_pods) == 0
    assert scheduler.reporter.wait_idle(5)
    [event] = api.events_for("default/p", "FailedScheduling")
    assert event.note == "Gang: the gang broke up"


def test_a_pod_allowed_after_waiting_whose_prebind_fails_is_unwound() -> None:
    scheduler, api = make()
    Step.permit_wait = 30.0
    Step.fail = {"pre_bind": Status.error("disk busy")}
    api.add_pod(pod("p"))
    scheduler.schedule_one(timeout=1)
    held(scheduler).allow("Step")
    poll(lambda: scheduler.queue.lengths()["backoff"] == 1, 5, "the pod backing off", interval=0.01)
    assert scheduler.binder.drain(5)
    assert_unwound_and_backing_off(scheduler, api)


def test_a_pod_deleted_while_waiting_is_rejected_at_once_and_reported_nowhere() -> None:
    scheduler, api = make()
    Step.permit_wait = 30.0
    api.add_pod(pod("p"))
    scheduler.schedule_one(timeout=1)
    assert len(scheduler.waiting_pods) == 1
    api.delete_pod("default/p")
    assert len(scheduler.waiting_pods) == 0 and unreserved_in_reverse()
    assert scheduler.state.assumed_count() == 0
    assert scheduler.queue.lengths() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0}
    assert scheduler.reporter.wait_idle(5)
    assert api.events_for("default/p", "FailedScheduling") == []


def test_allow_from_a_bind_worker_never_deadlocks_the_binder() -> None:
    scheduler, api = make()
    scheduler.binder.max_pending = 1  # the worker that allows holds the only slot
    Step.permit_wait, Step.hold_label = 30.0, "hold"
    Step.pre_bind_hook = lambda p: [w.allow("Step") for w in scheduler.waiting_pods if p.name == "releaser"]
    body = pod("held")
    body["metadata"]["labels"] = {"hold": "1"}
    api.add_pod(body)
    scheduler.schedule_one(timeout=1)
    api.add_pod(pod("releaser"))
    scheduler.schedule_one(timeout=1)
    poll(lambda: CALLS.count("Step.post_bind") == 2, 5, "both pods through the binding cycle", interval=0.01)
    assert scheduler.binder.drain(5)


def test_pods_parked_for_room_get_another_try_when_a_held_pod_gives_its_room_back() -> None:
    scheduler, api = make()
    scheduler.handlers.on_node_event("ADDED", node("gpu", gpus=1))
    Step.permit_wait, Step.hold_label = 0.2, "hold"
    holder = pod("holder", gpus=1)
    holder["metadata"]["labels"] = {"hold": "1"}
    api.add_pod(holder)
    scheduler.schedule_one(timeout=1)
    waiting = api.add_pod(pod("next", gpus=1))
    scheduler.schedule_one(timeout=1)  # no room: the holder is assumed on the only GPU
    assert scheduler.queue.lengths()["unschedulable"] == 1
    poll(lambda: scheduler.queue.lengths()["unschedulable"] == 1 and len(scheduler.waiting_pods) == 0, 5,
          "the holder timed out", interval=0.01)
    # "next" moved out of unschedulable by the holder's rejection, the holder itself parked
    lengths = scheduler.queue.lengths()
    assert lengths["active"] + lengths["backoff"] == 1
    drain(scheduler, api)
    assert scheduler.state.pods[waiting["metadata"]["uid"]].node == "gpu"  # Step's Bind keeps it assumed there
    assert not scheduler.state.is_placed(holder["metadata"]["uid"])


def test_queueing_hints_move_a_parked_pod_only_for_a_node_that_can_help() -> None:
    api = FakeAPI()
    scheduler = make_scheduler(api=api)
    scheduler.handlers.on_node_event("ADDED", node("small", gpus=1, labels={"pool": "a"}))
    api.add_pod(pod("big", gpus=4, nodeSelector={"pool": "a"}))  # rejected by NodeResourcesFit only
    api.add_pod(pod("picky", nodeSelector={"pool": "c"}))  # rejected by NodeAffinity only
    drain(scheduler, api)
    assert scheduler.queue.lengths()["unschedulable"] == 2
    scheduler.handlers.on_node_event("ADDED", node("also-small", gpus=2, labels={"pool": "b"}))
    assert scheduler.queue.lengths()["unschedulable"] == 2  # 2 GPUs cannot hold 4; pool b is not c
    scheduler.handlers.on_node_event("ADDED", node("big-here", gpus=8, labels={"pool": "a"}))
    assert scheduler.queue.lengths()["unschedulable"] == 1  # only big moved
    drain(scheduler, api)
    assert api.binds == [("default/big", "big-here")]


class Picky(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin):
    """Rejects every node and scores every node 0, unless its PreFilter / PreScore said Skip."""

    name = "Picky"
    skip: ClassVar[bool] = True

    def pre_filter(self, cycle: CycleState, pod: PodInfo) -> Status:
        return Status(Code.SKIP) if self.skip else SUCCESS

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        return Filtered.single(np.zeros(table.capacity, dtype=bool), "picky")

    def pre_score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: Any) -> Status:
        return Status(Code.SKIP)

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: Any) -> Any:
        raise AssertionError("Score runs although its PreScore said Skip")


@pytest.mark.parametrize("skip", [True, False])
def test_skip_at_prefilter_and_prescore_skips_that_plugins_filter_and_score(skip: bool) -> None:
    Picky.skip = skip
    config = {"profiles": [{"plugins": {point: {"enabled": [{"name": "Picky"}]}
                                        for point in ("preFilter", "filter", "preScore", "score")}}]}
    api = FakeAPI()
    scheduler = make_scheduler(config, api, plugins=[Picky])
    scheduler.handlers.on_node_event("ADDED", node("n0"))
    api.add_pod(pod("p"))
    result = scheduler.schedule_one(timeout=1)
    assert result is not None
    assert (result.node == "n0") is skip
    assert "Picky" not in {t.plugin for t in result.terms}


def test_percentage_of_nodes_to_score_samples_round_robin_at_least_100_nodes() -> None:
    """kube-scheduler's numFeasibleNodesToFind / nextStartNodeIndex: 10 % of 2,000 nodes = 200 scored per cycle,
    each cycle starting where the last stopped; below 100 nodes, or at 100 %, every feasible node."""
    from metrics_sched.config import parse_config
    from metrics_sched.framework.handle import Services
    from metrics_sched.framework.runtime import Framework
    from metrics_sched.state.cluster_state import ClusterState
    from metrics_sched.telemetry.cache import MetricCache
    from metrics_sched.telemetry.ledger import InFlightLedgerStore
    from tests.unit.fakes import FakeAPI, node

    registry = in_tree_registry(third_party=False)
    config = parse_config({"percentageOfNodesToScore": 10}, registry.catalog())
    state = ClusterState()
    framework = Framework(config.profiles[0], registry.plugins,
                          Services(state, MetricCache(), InFlightLedgerStore(), FakeAPI()))
    for i in range(2000):
        state.upsert_node(node(f"n{i:04d}"))
    from metrics_sched.model.podinfo import parse_pod
    from tests.unit.fakes import pod
    first = framework.schedule(parse_pod(pod("a")), state.table)
    second = framework.schedule(parse_pod(pod("b")), state.table)
    assert first.feasible_rows.size == second.feasible_rows.size == 200
    assert first.feasible_rows.tolist() == list(range(200))
    assert second.feasible_rows.tolist() == list(range(200, 400))
    assert first.node in {state.table.name(r) for r in first.feasible_rows.tolist()}
    small = ClusterState()
    framework = Framework(config.profiles[0], registry.plugins,
                          Services(small, MetricCache(), InFlightLedgerStore(), FakeAPI()))
    for i in range(99):
        small.upsert_node(node(f"s{i:02d}"))
    assert framework.schedule(parse_pod(pod("c")), small.table).feasible_rows.size == 99


def test_the_sample_wraps_to_the_first_feasible_node_past_the_last() -> None:
    """nextStartNodeIndex past every feasible node: the next sample starts again from the first one."""
    import numpy as np

    from metrics_sched.config import parse_config
    from metrics_sched.framework.handle import Services
    from metrics_sched.framework.runtime import Framework
    from metrics_sched.state.cluster_state import ClusterState
    from metrics_sched.telemetry.cache import MetricCache
    from metrics_sched.telemetry.ledger import InFlightLedgerStore
    from tests.unit.fakes import FakeAPI

    registry = in_tree_registry(third_party=False)
    config = parse_config({"percentageOfNodesToScore": 10}, registry.catalog())
    framework = Framework(config.profiles[0], registry.plugins,
                          Services(ClusterState(), MetricCache(), InFlightLedgerStore(), FakeAPI()))
    framework._next_start = 800
    feasible = np.arange(500, dtype=np.int64)  # of 2,000 nodes, only the first 500 fit
    assert framework._sample(feasible, 2000).tolist() == list(range(200))
    assert framework._sample(feasible, 2000).tolist() == list(range(200, 400))


@pytest.mark.parametrize("seed", range(6))
def test_choose_takes_the_highest_and_draws_among_ties_as_a_draw_over_all_of_them(seed: int) -> None:
    """The pick is the only highest total, or a draw among the tied highest with the profile's random, drawing as
    `best[random.randrange(len(best))]` over flatnonzero(total == max) (kube-scheduler's selectHost): the same
    draws, so a seeded run keeps its decisions."""
    table = NodeTable()
    for i in range(40):
        table.upsert(parse_node(node(f"n{i}")))
    rng = np.random.default_rng(seed)
    rows = np.arange(40, dtype=np.int64)
    for ties in (1, 2, 7):
        total = np.round(rng.random(40) * 50, 1)
        top = np.sort(rng.choice(40, size=ties, replace=False))
        total[top] = 90.0
        picker = SimpleNamespace(_place=lambda *_: (True, None), random=random.Random(seed))
        result = CycleResult(pod=parse_pod(pod("p")), profile="p", nodes_total=40)
        result.total = total
        Framework.choose(picker, result, table, rows)  # type: ignore[arg-type]
        reference = random.Random(seed)
        expected = int(top[reference.randrange(ties)]) if ties > 1 else int(top[0])
        assert result.row == expected and result.node == f"n{expected}"
        assert picker.random.random() == reference.random()  # as many draws as the reference made
