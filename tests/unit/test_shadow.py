"""A shadow profile scores the pods of its schedulerName and records where they would go; it binds, assumes,
reports and preempts nothing, and the real profile's accounting is untouched."""

from __future__ import annotations

import pytest

from metrics_sched.audit import DecisionRing
from metrics_sched.audit.auditor import Auditor
from metrics_sched.config import ConfigError, parse_config
from metrics_sched.plugins import in_tree_registry
from tests.unit.fakes import node, pod
from tests.unit.test_scheduler import drain
from tests.unit.test_telemetry_scoring import feed, gpu_nodes, make

CONFIG = {"profiles": [{"schedulerName": "metrics-sched"},
                       {"schedulerName": "default-scheduler", "shadow": True}]}


def test_shadow_records_where_a_default_scheduler_pod_would_go_and_changes_nothing() -> None:
    scheduler, api, cache = make(CONFIG)
    ring = DecisionRing(100)
    auditor = Auditor(scheduler.state, ring, config_hash="x", log_decisions=False,
                      shadow_profiles=frozenset({"default-scheduler"}))
    scheduler.cycle_observers.append(auditor.on_cycle)
    gpu_nodes(scheduler, ["cold", "hot"])
    feed(cache, {"gpu_temperature": {"cold": 35, "hot": 80}})
    api.add_pod(pod("theirs", gpus=8, scheduler="default-scheduler"))
    api.add_pod(pod("huge", cpu="500", scheduler="default-scheduler"))
    drain(scheduler, api)
    assert api.binds == [] and api.events == [] and api.condition_writes == 0 and not api.annotations
    assert not scheduler.state.is_placed(api.pods["default/theirs"]["metadata"]["uid"])
    shadow = {r.pod: r for r in ring.query()}
    assert shadow["default/theirs"].result == "shadow" and shadow["default/theirs"].node == "cold"
    assert "would have bound to cold" in shadow["default/theirs"].message
    assert shadow["default/huge"].result == "shadow" and shadow["default/huge"].node is None
    assert scheduler.queue.lengths() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0}

    # The shadow pod took 8 GPUs nowhere: our own 8-GPU pod still fits on the cold node.
    api.add_pod(pod("ours", gpus=8))
    drain(scheduler, api)
    assert api.binds == [("default/ours", "cold")]


def test_a_shadow_pod_bound_by_kube_scheduler_counts_where_it_went() -> None:
    scheduler, api, _ = make(CONFIG)
    scheduler.handlers.on_node_event("ADDED", node("only", cpu="1"))
    api.add_pod(pod("theirs", cpu="800m", scheduler="default-scheduler"))
    drain(scheduler, api)
    api.bind("default", "theirs", api.pods["default/theirs"]["metadata"]["uid"], "only")  # kube-scheduler's bind
    api.add_pod(pod("ours", cpu="800m"))
    drain(scheduler, api)
    assert api.binds == [("default/theirs", "only")]  # ours does not fit next to it


def test_only_a_shadow_profile_may_take_default_scheduler_without_replacing_it() -> None:
    catalog = in_tree_registry(third_party=False).catalog()
    assert parse_config(CONFIG, catalog).profiles[1].shadow
    with pytest.raises(ConfigError, match=r"profiles\[0\]\.schedulerName"):
        parse_config({"profiles": [{"schedulerName": "default-scheduler"}]}, catalog)


def test_a_shadow_cycle_that_fails_reports_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler, api, _ = make(CONFIG)
    scheduler.handlers.on_node_event("ADDED", node("only"))
    shadow = scheduler.frameworks["default-scheduler"]

    def broken(*_: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(shadow, "schedule", broken)
    api.add_pod(pod("theirs", scheduler="default-scheduler"))
    result = scheduler.schedule_one(timeout=1)
    assert result is not None and "boom" in result.message()
    assert scheduler.reporter.wait_idle(5)
    assert api.events == [] and api.condition_writes == 0
    assert scheduler.queue.lengths() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0}
