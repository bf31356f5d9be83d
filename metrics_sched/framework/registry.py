"""Plugin registry: the plugins it is given (metrics_sched.plugins builds the in-tree one) plus third-party plugins
found through an entry-point group.

A third-party package declares, in its pyproject.toml:

    [project.entry-points."metrics_sched.plugins"]
    MyPlugin = "my_package.my_module:MyPlugin"

The class subclasses one or more extension-point interfaces exported by metrics_sched.framework.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from importlib.metadata import entry_points

from metrics_sched.config.loader import PluginSpec
from metrics_sched.framework.args import check_args_class
from metrics_sched.framework.interfaces import EXTENSION_POINTS, Plugin

ENTRY_POINT_GROUP = "metrics_sched.plugins"
log = logging.getLogger(__name__)

__all__ = ["ENTRY_POINT_GROUP", "Registry", "points_of"]


def points_of(cls: type[Plugin]) -> frozenset[str]:
    return frozenset(point for point, interface in EXTENSION_POINTS.items() if issubclass(cls, interface))


class Registry:
    def __init__(self, plugins: Mapping[str, type[Plugin]]) -> None:
        self.plugins = dict(plugins)

    @classmethod
    def of(cls, plugins: Iterable[type[Plugin]], *, third_party: bool = True) -> Registry:
        """`plugins` (e.g. the in-tree ones: metrics_sched.plugins.in_tree_registry), each with the same checks as
        a third-party plugin, then the entry points' unless `third_party` is False."""
        registry = cls({})
        for plugin in plugins:
            registry.register(plugin)
        if third_party:
            registry.load_entry_points()
        return registry

    def register(self, plugin: type[Plugin]) -> None:
        if not plugin.name:
            raise ValueError(f"{plugin.__qualname__} has no name")
        if plugin.name in self.plugins and self.plugins[plugin.name] is not plugin:
            raise ValueError(f"plugin name {plugin.name!r} is already taken by {self.plugins[plugin.name]}")
        if not points_of(plugin):
            raise ValueError(f"{plugin.__qualname__} implements no extension point")
        try:
            check_args_class(plugin.Args, f"{plugin.name}.Args")
        except TypeError as exc:
            raise ValueError(str(exc)) from None
        self.plugins[plugin.name] = plugin

    def load_entry_points(self) -> None:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                plugin = ep.load()
                if not (isinstance(plugin, type) and issubclass(plugin, Plugin)):
                    raise TypeError(f"{ep.value} is not a metrics_sched Plugin class")
                self.register(plugin)
            except Exception as exc:  # noqa: BLE001 - a broken third-party plugin must not hide the others
                log.error("cannot load plugin entry point %s = %s: %s", ep.name, ep.value, exc)

    def catalog(self) -> dict[str, PluginSpec]:
        return {name: PluginSpec(points_of(cls), cls.parse_args) for name, cls in self.plugins.items()}
