"""The plugin guide's third-party plugin (docs/plugins.md) with its own index of a CRD
(tests/plugin_dist/msched_testplugins/reserved.py), found through its entry point and driven through a Scheduler by
fake API events: the guide shows that very file."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from metrics_sched.config import parse_config
from metrics_sched.framework import ApiKind
from metrics_sched.plugins import in_tree_registry
from metrics_sched.scheduler import Scheduler
from tests.polling import poll
from tests.unit.fakes import FakeAPI, node, pod

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DIST = ROOT / "tests" / "plugin_dist"
SOURCE = PLUGIN_DIST / "msched_testplugins" / "reserved.py"
TEAM = "example.com/team"


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Scheduler, FakeAPI, ApiKind]]:
    monkeypatch.syspath_prepend(str(PLUGIN_DIST))  # its .dist-info makes the entry points visible
    registry = in_tree_registry()
    assert "Reserved" in registry.plugins  # from the entry point, like any installed package's
    config = parse_config({"profiles": [{"schedulerName": "metrics-sched", "plugins": {
        "filter": {"enabled": [{"name": "Reserved"}]}, "score": {"enabled": [{"name": "Reserved", "weight": 100}]},
    }}]}, registry.catalog())
    api = FakeAPI()
    scheduler = Scheduler(config, registry.plugins, api)
    api.watchers.append(scheduler.handlers)
    kind = next(k for k in scheduler.handlers.kinds if k.resource == "reservations")
    yield scheduler, api, kind


def reservation(node_name: str, team: str) -> dict[str, Any]:
    return {"metadata": {"name": node_name}, "spec": {"nodeName": node_name, "team": team}}


def member(name: str, team: str) -> dict[str, Any]:
    body = pod(name)
    body["metadata"]["labels"] = {TEAM: team}
    return body


def run(scheduler: Scheduler, until: Any, what: str) -> None:
    def step() -> bool:
        scheduler.schedule_one(timeout=0.01)
        return bool(until())
    poll(step, 20, what, interval=0.0)


def test_the_crd_is_watched_and_awaited_where_served(made: tuple[Scheduler, FakeAPI, ApiKind]) -> None:
    scheduler, _, kind = made
    assert kind.path == "/apis/example.com/v1/reservations" and kind.optional
    assert kind.name in scheduler.handlers.awaited  # where served: a pod placed before the list would err
    scheduler.handlers.unwatched([kind.name])  # the app's answer where the CRD is not installed
    assert kind.name not in scheduler.handlers.awaited and {"nodes", "pods"} <= scheduler.handlers.awaited


def test_reserved_nodes_take_only_their_teams_pods_and_are_preferred(
        made: tuple[Scheduler, FakeAPI, ApiKind]) -> None:
    scheduler, api, kind = made
    for name in ("n1", "n2", "n3"):
        scheduler.handlers.on_node_event("ADDED", node(name))
    scheduler.handlers.on_object_event(kind, "ADDED", reservation("n1", "a"))
    scheduler.handlers.on_object_event(kind, "ADDED", reservation("n2", "b"))
    api.add_pod(member("a-1", "a"))
    api.add_pod(member("c-1", "c"))
    run(scheduler, lambda: len(api.binds) == 2, "both pods bound")
    assert dict(api.binds) == {"default/a-1": "n1", "default/c-1": "n3"}


def test_a_deleted_reservation_moves_the_pods_it_parked(made: tuple[Scheduler, FakeAPI, ApiKind]) -> None:
    scheduler, api, kind = made
    scheduler.handlers.on_node_event("ADDED", node("n1"))
    scheduler.handlers.on_object_event(kind, "ADDED", reservation("n1", "a"))
    api.add_pod(member("b-1", "b"))
    run(scheduler, lambda: api.events_for("default/b-1", "FailedScheduling"), "b-1 unschedulable")
    assert "reserved for another team" in api.events_for("default/b-1", "FailedScheduling")[0].note
    scheduler.handlers.on_object_event(kind, "DELETED", reservation("n1", "a"))
    run(scheduler, lambda: api.binds, "b-1 bound once the reservation is gone")
    assert api.binds == [("default/b-1", "n1")]


def test_the_readme_shows_this_very_plugin() -> None:
    readme = (ROOT / "docs" / "plugins.md").read_text()  # the plugin guide the README links
    block = re.search(r"```python\n(# tests/plugin_dist/msched_testplugins/reserved\.py.*?)```", readme, re.S)
    assert block is not None
    shown = block.group(1).split("\n", 1)[1]
    source = SOURCE.read_text().split('"""\n\n', 1)[1]  # the module's docstring aside
    assert shown == source and len(shown.splitlines()) <= 40
