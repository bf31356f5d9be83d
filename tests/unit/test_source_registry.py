"""The source registry: types found by entry point, errors that name `sources[i].<field>`, third-party types."""

from __future__ import annotations

import ast
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from metrics_sched.app.sources import build_sources
from metrics_sched.config import ConfigError, SchedulerConfig
from metrics_sched.ports import FetchResult, NodeDirectory, Sample
from metrics_sched.telemetry import (
    ENTRY_POINT_GROUP,
    PolledSource,
    SourceContext,
    SourceRegistry,
    default_registry,
)

pytestmark = pytest.mark.unit

NODES = NodeDirectory(names=frozenset({"n1"}), by_internal_ip={}, cpu_allocatable={}, memory_allocatable={})
CTX = SourceContext(base_dir=Path("."))


class StaticSource(PolledSource):
    """A third-party source as a plugin author writes one: a fetch, nothing else."""

    def __init__(self, name: str, value: float, interval: float) -> None:
        super().__init__(name, interval, ["static_value"])
        self.value = value

    def fetch(self, nodes: NodeDirectory) -> FetchResult:
        samples = [Sample("static_value", node, self.value, 1.0) for node in sorted(nodes.names)]
        return FetchResult(samples=samples, dropped={}, errors={})


def static_from_config(name: str, spec: Mapping[str, Any], ctx: SourceContext) -> PolledSource:
    value = spec.get("value")
    if not isinstance(value, int | float):
        raise ConfigError("value", "must be a number")
    return StaticSource(name, float(value), 5.0)


STATIC_MODULE = types.SimpleNamespace(TYPE="static", from_config=static_from_config)


class FakeEntryPoint:
    def __init__(self, name: str, value: str, target: object = None, error: Exception | None = None) -> None:
        self.name = name
        self.value = value
        self._target = target
        self._error = error
        self.group = ENTRY_POINT_GROUP

    def load(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._target


def config(*sources: dict[str, Any]) -> SchedulerConfig:
    return SchedulerConfig(profiles=(), sources=tuple(sources))


def test_the_built_in_types_are_registered_by_entry_point() -> None:
    registry = default_registry()
    assert {"prometheus", "metrics-server", "cmdb"} <= set(registry.names())
    assert registry.broken == {}
    assert registry.get("prometheus").origin == "adapters.prometheus"


def test_a_third_party_type_registered_by_entry_point_is_built_and_polled() -> None:
    registry = SourceRegistry.from_entry_points([FakeEntryPoint("static", "thirdparty.static", STATIC_MODULE)])
    [source] = build_sources(config({"name": "s", "type": "static", "value": 7}), Path("."), None, registry=registry)
    assert isinstance(source, StaticSource) and (source.name, source.interval) == ("s", 5.0)
    result = source.poll(NODES)
    assert result is not None and [s.value for s in result.samples] == [7.0]
    assert source.health.up and source.health.extra["type"] == "static"


def test_an_unknown_type_names_the_field_and_lists_the_known_types() -> None:
    registry = SourceRegistry.from_entry_points([FakeEntryPoint("static", "thirdparty.static", STATIC_MODULE)])
    specs = config({"name": "s", "type": "static", "value": 1}, {"name": "x", "type": "prometheus"})
    with pytest.raises(ConfigError) as info:
        build_sources(specs, Path("."), None, registry=registry)
    assert info.value.field == "sources[1].type"
    assert "unknown source type 'prometheus'" in info.value.message and "static" in info.value.message


def test_a_failing_entry_point_is_reported_by_name_and_hides_no_other_type(caplog: pytest.LogCaptureFixture) -> None:
    registry = SourceRegistry.from_entry_points([
        FakeEntryPoint("broken", "thirdparty.broken", error=ImportError("No module named 'thirdparty.broken'")),
        FakeEntryPoint("static", "thirdparty.static", STATIC_MODULE),
        FakeEntryPoint("no-factory", "thirdparty.nothing", types.SimpleNamespace(TYPE="no-factory")),
        FakeEntryPoint("renamed", "thirdparty.static", STATIC_MODULE),  # TYPE "static" != "renamed"
    ])
    assert registry.names() == ["static"]
    assert set(registry.broken) == {"broken", "no-factory", "renamed"}
    assert "No module named 'thirdparty.broken'" in registry.broken["broken"]
    assert "from_config" in registry.broken["no-factory"] and "'static'" in registry.broken["renamed"]
    assert "'broken'" in caplog.text
    with pytest.raises(ConfigError) as info:
        build_sources(config({"name": "b", "type": "broken"}), Path("."), None, registry=registry)
    assert info.value.field == "sources[0].type"
    assert "failed to load" in info.value.message and "No module named" in info.value.message
    [source] = build_sources(config({"name": "s", "type": "static", "value": 1}), Path("."), None,
                             registry=registry)
    assert source.name == "s"


def test_a_name_registered_twice_by_different_modules_is_refused() -> None:
    other = types.SimpleNamespace(TYPE="static", from_config=static_from_config)
    registry = SourceRegistry.from_entry_points([
        FakeEntryPoint("static", "a.static", STATIC_MODULE), FakeEntryPoint("static", "a.static", STATIC_MODULE),
        FakeEntryPoint("static", "b.static", other),
    ])
    assert registry.names() == [] and "registered twice (a.static and b.static)" in registry.broken["static"]


def test_config_errors_of_a_type_name_the_field_under_sources_i() -> None:
    registry = SourceRegistry.from_entry_points([FakeEntryPoint("static", "thirdparty.static", STATIC_MODULE)])
    with pytest.raises(ConfigError) as info:
        build_sources(config({"name": "s", "type": "static", "value": 1}, {"name": "t", "type": "static"}),
                      Path("."), None, registry=registry)
    assert info.value.field == "sources[1].value" and str(info.value) == "sources[1].value: must be a number"


def test_built_in_config_errors_name_the_field_under_sources_i() -> None:
    spec = {"name": "p", "type": "prometheus", "url": "http://p", "metrics": [{"name": "a", "query": "up",
                                                                             "scale": 0}]}
    with pytest.raises(ConfigError) as info:
        build_sources(config(spec), Path("."), None)
    assert info.value.field == "sources[0].metrics[0].scale"


def test_a_factory_that_crashes_or_builds_something_else_is_a_config_error() -> None:
    def crash(name: str, spec: Mapping[str, Any], ctx: SourceContext) -> PolledSource:
        raise RuntimeError("plugin bug")

    def wrong(name: str, spec: Mapping[str, Any], ctx: SourceContext) -> Any:
        return object()

    registry = SourceRegistry.from_entry_points([
        FakeEntryPoint("crash", "x.crash", types.SimpleNamespace(TYPE="crash", from_config=crash)),
        FakeEntryPoint("wrong", "x.wrong", types.SimpleNamespace(TYPE="wrong", from_config=wrong)),
    ])
    for kind, text in (("crash", "RuntimeError: plugin bug"), ("wrong", "not a PolledSource")):
        with pytest.raises(ConfigError) as info:
            build_sources(config({"name": "s", "type": kind}), Path("."), None, registry=registry)
        assert info.value.field == "sources[0]" and text in info.value.message


def test_sources_built_before_a_bad_one_are_closed() -> None:
    closed: list[str] = []

    class Closing(StaticSource):
        def close(self) -> None:
            closed.append(self.name)

    module = types.SimpleNamespace(TYPE="closing", from_config=lambda name, spec, ctx: Closing(name, 1.0, 1.0))
    registry = SourceRegistry.from_entry_points([FakeEntryPoint("closing", "x.closing", module)])
    with pytest.raises(ConfigError):
        build_sources(config({"name": "a", "type": "closing"}, {"name": "b", "type": "nope"}), Path("."), None,
                      registry=registry)
    assert closed == ["a"]


def test_the_cli_builds_sources_without_importing_adapters() -> None:
    import metrics_sched.app.sources as module

    tree = ast.parse(Path(module.__file__ or "").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not any(name == "adapters" or name.startswith("adapters.") for name in imported), imported
