"""The telemetry source types, found through the `metrics_sched.sources` entry-point group.

A source type is a module (or any object) with `TYPE` (the name configs use in `sources[i].type`, equal
to the entry point's name) and `from_config(name, spec, ctx) -> PolledSource`. The built-in ones
(prometheus, metrics-server, cmdb) are registered in pyproject.toml exactly like a third-party one:

    [project.entry-points."metrics_sched.sources"]
    my-source = "my_package.my_source"

A type whose entry point fails to load is reported by name (and by `sources[i].type` when a config
uses it); it never hides the types that did load.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from metrics_sched.config.errors import ConfigError
from metrics_sched.telemetry.polled import PolledSource

ENTRY_POINT_GROUP = "metrics_sched.sources"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourceContext:
    """What a source type may need beyond its own spec.

    base_dir: relative file paths in the spec (secrets, CA bundles) are resolved against it (the config
    file's directory). kube_client_factory: returns a new HTTP client (an httpx.Client) already pointed at
    the Kubernetes API server with the scheduler's credentials; None when only validating (check-config).
    """

    base_dir: Path
    kube_client_factory: Callable[[], Any] | None = None


class SourceFactory(Protocol):
    def __call__(self, name: str, spec: Mapping[str, Any], ctx: SourceContext, /) -> PolledSource:
        """Validates `spec` (ConfigError with `field` relative to the spec) and builds the source."""
        ...


class EntryPointLike(Protocol):
    """The part of importlib.metadata.EntryPoint the registry uses (tests pass stand-ins)."""

    @property
    def name(self) -> str: ...

    @property
    def value(self) -> str: ...

    def load(self) -> Any: ...


@dataclass(frozen=True)
class SourceType:
    name: str
    from_config: SourceFactory
    origin: str  # the entry point's value, e.g. "adapters.prometheus"


class SourceRegistry:
    """Source types by name, and the ones that failed to load with why."""

    def __init__(self, types: Iterable[SourceType] = (), broken: Mapping[str, str] | None = None) -> None:
        self._types = {t.name: t for t in types}
        self.broken: dict[str, str] = dict(broken or {})

    @classmethod
    def from_entry_points(cls, entry_points: Iterable[EntryPointLike] | None = None) -> SourceRegistry:
        """Loads every entry point of the group (all installed ones unless `entry_points` is given)."""
        if entry_points is None:
            entry_points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        types: dict[str, SourceType] = {}
        broken: dict[str, str] = {}
        for entry in entry_points:
            if entry.name in types and types[entry.name].origin == entry.value:
                continue  # the same distribution seen twice on the path
            try:
                loaded = _source_type(entry.name, entry.value, entry.load())
            except Exception as exc:  # noqa: BLE001 - one broken plugin must not hide the others
                broken[entry.name] = f"{entry.value}: {type(exc).__name__}: {exc}"
                log.error("source type %r failed to load: %s", entry.name, broken[entry.name])
                continue
            if entry.name in types or entry.name in broken:
                first = types.pop(entry.name, None)
                broken[entry.name] = (f"registered twice ({first.origin if first else broken[entry.name]} and "
                                      f"{entry.value})")
                log.error("source type %r: %s", entry.name, broken[entry.name])
                continue
            types[entry.name] = loaded
        return cls(types.values(), broken)

    def names(self) -> list[str]:
        """The usable types, sorted."""
        return sorted(self._types)

    def get(self, name: str) -> SourceType:
        """The type; ConfigError(field "type") when unknown or broken, listing the known ones."""
        found = self._types.get(name)
        if found is not None:
            return found
        if name in self.broken:
            raise ConfigError("type", f"source type {name!r} failed to load: {self.broken[name]}")
        known = ", ".join(self.names()) or "none installed"
        raise ConfigError("type", f"unknown source type {name!r} (known: {known})")

    def build(self, name: str, spec: Mapping[str, Any], ctx: SourceContext) -> PolledSource:
        """One source from its spec; ConfigError names fields relative to the spec."""
        kind = spec.get("type")
        if not isinstance(kind, str):
            raise ConfigError("type", f"must be a string, got {type(kind).__name__}")
        source_type = self.get(kind)
        try:
            source = source_type.from_config(name, spec, ctx)
        except ConfigError:
            raise
        except Exception as exc:  # a plugin's bug is reported as its config's problem (exit 2), not a traceback
            raise ConfigError("", f"source type {kind!r} ({source_type.origin}) failed to build: "
                                  f"{type(exc).__name__}: {exc}") from exc
        if not isinstance(source, PolledSource):
            source_close = getattr(source, "close", None)
            if callable(source_close):
                source_close()
            raise ConfigError("", f"source type {kind!r} ({source_type.origin}) built a "
                                  f"{type(source).__name__}, not a PolledSource")
        source.health.extra.setdefault("type", kind)
        return source

    def build_all(self, specs: Sequence[Mapping[str, Any]], ctx: SourceContext) -> list[PolledSource]:
        """Every source of the config's `sources` list; errors name `sources[i].<field>`. All or nothing:
        when one fails, the ones already built are closed."""
        sources: list[PolledSource] = []
        try:
            for i, spec in enumerate(specs):
                try:
                    sources.append(self.build(str(spec.get("name", "")), spec, ctx))
                except ConfigError as exc:
                    field = f"sources[{i}].{exc.field}" if exc.field else f"sources[{i}]"
                    raise ConfigError(field, exc.message) from None
        except ConfigError:
            for source in sources:
                source.close()
            raise
        return sources


def _source_type(name: str, origin: str, loaded: object) -> SourceType:
    declared = getattr(loaded, "TYPE", None)
    from_config = getattr(loaded, "from_config", None)
    if not isinstance(declared, str) or not callable(from_config):
        raise TypeError(f"{origin} must define TYPE (a str) and from_config(name, spec, ctx)")
    if declared != name:
        raise TypeError(f"{origin} declares TYPE {declared!r}, but is registered as {name!r}")
    factory: SourceFactory = from_config
    return SourceType(name=name, from_config=factory, origin=origin)


@functools.cache
def default_registry() -> SourceRegistry:
    """The installed source types, loaded once per process."""
    return SourceRegistry.from_entry_points()
