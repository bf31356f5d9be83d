"""The PromQL behind the Grafana dashboards, ready to run against a live Prometheus.

`dashboard_queries(job)` lists (dashboard uid, panel title, expression) for every target of every panel
in grafana/dashboards/*.json, with Grafana's template variables replaced the way Grafana would for a
query over a short range: `$job` by the given job regex, `$metric` (the per-metric panels' repeat
variable) by `.*` (every value of the label, i.e. Grafana's "All"), `$__rate_interval` by 30s,
`$__interval` by 15s, `$__range` by 5m. Unknown variables raise, so a dashboard that gains one fails
loudly here.

`variable_queries(job)` does the same for the dashboards' query variables: `label_values(series, label)` as the
PromQL `group by (label) (series)`, whose result lists the values Grafana would offer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

DASHBOARD_DIR = Path(__file__).resolve().parents[1] / "grafana" / "dashboards"

# Grafana's built-in interval variables, as Grafana would expand them for a 5-minute range.
BUILTINS = {"__rate_interval": "30s", "__interval": "15s", "__range": "5m"}

# Dashboard template variables other than $job and $datasource, with the regex that stands for "All".
TEMPLATE_VARIABLES = {"metric": ".*"}

# Grafana's `label_values(series, label)`, series with or without a {matcher} part.
_LABEL_VALUES = re.compile(r"^label_values\(\s*(.+?)\s*,\s*(\w+)\s*\)$", re.S)

# $name, ${name} and ${name:format}.
_VARIABLE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")


def load_dashboards(directory: Path = DASHBOARD_DIR) -> list[dict[str, Any]]:
    """Every dashboard JSON file in the directory, sorted by file name."""
    return [json.loads(path.read_text()) for path in sorted(directory.glob("*.json"))]


def iter_panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Panels in layout order, descending into rows (collapsed rows keep their panels inside)."""
    out: list[dict[str, Any]] = []
    for panel in panels:
        out.append(panel)
        out.extend(iter_panels(panel.get("panels", [])))
    return out


def promql_string(value: str) -> str:
    """Escape a value for the inside of a double-quoted PromQL string."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def substitute(expr: str, job: str) -> str:
    """Replace the dashboard's template variables by live values (see the module docstring)."""
    values = {"job": promql_string(job), **{k: promql_string(v) for k, v in TEMPLATE_VARIABLES.items()}, **BUILTINS}

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            raise ValueError(f"unknown template variable ${name} in {expr!r}")
        return values[name]

    return _VARIABLE.sub(replace, expr)


def dashboard_queries(job: str) -> list[tuple[str, str, str]]:
    """(dashboard uid, panel title, PromQL) for every target of every panel, variables substituted."""
    queries: list[tuple[str, str, str]] = []
    for dashboard in load_dashboards():
        for panel in iter_panels(dashboard.get("panels", [])):
            for target in panel.get("targets", []):
                expr = target.get("expr")
                if expr:
                    queries.append((dashboard["uid"], panel["title"], substitute(expr, job)))
    return queries


def variable_queries(job: str) -> list[tuple[str, str, str]]:
    """(dashboard uid, variable name, PromQL listing its values) for every query variable, variables substituted."""
    queries: list[tuple[str, str, str]] = []
    for dashboard in load_dashboards():
        for variable in dashboard["templating"]["list"]:
            if variable["type"] != "query":
                continue
            query = variable["query"]
            text = query["query"] if isinstance(query, dict) else str(query)
            match = _LABEL_VALUES.match(text.strip())
            if not match:
                raise ValueError(f"{dashboard['uid']} / ${variable['name']}: not label_values(series, label): {text!r}")
            queries.append((dashboard["uid"], variable["name"],
                            f"group by ({match[2]}) ({substitute(match[1], job)})"))
    return queries
