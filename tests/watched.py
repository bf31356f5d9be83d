"""What the default profile watches: nodes, pods, and the kinds its plugins' cluster indexes declare (and the
cluster state keeps), as the app hands them to KubeClusterSource."""

from __future__ import annotations

from adapters.kubernetes.source import CORE_RESOURCES, WatchedResource, watched
from metrics_sched.config import parse_config
from metrics_sched.plugins import in_tree_registry
from metrics_sched.scheduler import Scheduler
from tests.unit.fakes import FakeAPI

__all__ = ["default_resources", "default_scheduler", "resources_of"]


def default_scheduler() -> Scheduler:
    registry = in_tree_registry(third_party=False)
    return Scheduler(parse_config({}, registry.catalog()), registry.plugins, FakeAPI())


def resources_of(scheduler: Scheduler) -> tuple[WatchedResource, ...]:
    """As on an API server serving none of the optional kinds (the gang APIs' PodGroups, DRA's objects), and as the
    app then tells the scheduler: it does not wait for their lists (app.core)."""
    handlers = scheduler.handlers
    handlers.unwatched(kind.name for kind in handlers.kinds if kind.optional)
    return (*CORE_RESOURCES, *(watched(kind) for kind in handlers.kinds if not kind.optional))


def default_resources() -> tuple[WatchedResource, ...]:
    return resources_of(default_scheduler())
