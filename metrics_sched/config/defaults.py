"""The effective default configuration as a config file (`metrics-sched config defaults`), as kube-scheduler's
`--write-config-to` writes its own: every field that has a default, from the same field table as the JSON Schema
(config/schema.py), and the default profile with its plugins spelled out per extension point (loader.DEFAULT_PLUGINS),
so the output loads back to the configuration an empty file gives.

Left out: fields without a default (leaderElection.resourceNamespace is decided at start: the pod's namespace),
`parallelism` (bindWorkers by another name: giving both must agree), fields accepted only for upstream
compatibility that do nothing here, and plugin args (each plugin's own defaults apply; docs/configuration.md).
"""

from __future__ import annotations

from typing import Any

import yaml

from metrics_sched.config.loader import DEFAULT_PLUGINS
from metrics_sched.config.model import EXTENSION_POINT_NAMES
from metrics_sched.config.schema import json_schema

# Not written: an alias, and upstream-only fields without effect (a default of false is what they always are).
SKIPPED = frozenset({"parallelism", "enableContentionProfiling", "delayCacheUntilActive"})

HEADER = ("# metrics-sched's effective default configuration (`metrics-sched config defaults`). It loads back to what\n"
          "# an empty file gives; plugin lists are written in full (disabled: '*', then the defaults in order), so a\n"
          "# copy no longer follows the defaults of a later version. Plugin args are each plugin's defaults.\n")


def _defaults_of(node: dict[str, Any]) -> dict[str, Any]:
    """The fields of an object schema that have a default; nested objects when they have any; an object with
    required fields (audit.file: its path) is left out, since it has no default as a whole."""
    out: dict[str, Any] = {}
    for name, field in node.get("properties", {}).items():
        if name in SKIPPED:
            continue
        if "default" in field:
            out[name] = field["default"]
        elif "properties" in field and not field.get("required"):
            nested = _defaults_of(field)
            if nested:
                out[name] = nested
    return out


def default_profile() -> dict[str, Any]:
    profile = _defaults_of(json_schema()["properties"]["profiles"]["items"])
    profile["plugins"] = {
        point: {"disabled": [{"name": "*"}],
                "enabled": [{"name": ref.name, "weight": ref.weight} if point == "score" else {"name": ref.name}
                            for ref in DEFAULT_PLUGINS[point]]}
        for point in EXTENSION_POINT_NAMES if DEFAULT_PLUGINS.get(point)
    }
    return profile


def default_document() -> dict[str, Any]:
    document = _defaults_of(json_schema())
    document["profiles"] = [default_profile()]
    return document


def render_defaults() -> str:
    return HEADER + yaml.safe_dump(default_document(), sort_keys=False, default_flow_style=False)


__all__ = ["default_document", "default_profile", "render_defaults"]
