"""The tests' one recipe for an in-process Scheduler: the built-in plugins (plus a test's own), a configuration
parsed against their catalog, and the ports the test hands in. Shared by unit and e2e tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from metrics_sched.config import parse_config
from metrics_sched.framework.registry import Registry
from metrics_sched.plugins import in_tree_registry
from metrics_sched.scheduler import Scheduler
from tests.unit.fakes import FakeAPI

__all__ = ["make_scheduler"]


def make_scheduler(config: Mapping[str, Any] | None = None, api: Any = None, *, plugins: Iterable[type] = (),
                   registry: Registry | None = None, **ports: Any) -> Scheduler:
    """`config`: the configuration document (default: all defaults); `api`: the scheduler's PodWriter (default: a
    fresh FakeAPI). A FakeAPI also gets the scheduler's handlers as its watcher, so its writes come back as events
    the way the apiserver's watch would bring them. `plugins`: registered on the default registry (no third-party
    entry points) before the configuration is parsed; `registry`: another registry instead. `ports`: the
    Scheduler's keyword arguments (preemptor, volume_writer, is_leader, ...)."""
    registry = registry or in_tree_registry(third_party=False)
    for plugin in plugins:
        registry.register(plugin)
    api = FakeAPI() if api is None else api
    scheduler = Scheduler(parse_config(config or {}, registry.catalog()), registry.plugins, api, **ports)
    if isinstance(api, FakeAPI):
        api.watchers.append(scheduler.handlers)
    return scheduler
