"""Grafana dashboards: structure, datasource wiring, units, PromQL hygiene and the generated ConfigMap.

The PromQL checks use a small lexer (`parse_promql`) that knows enough of the language for these
dashboards: selectors with label matchers, range brackets, function calls, aggregation clauses
(by/without) and vector-matching clauses (on/ignoring/group_left/group_right). Anything it does not
understand fails the test rather than passing silently.
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.grafana_queries import (
    BUILTINS,
    DASHBOARD_DIR,
    TEMPLATE_VARIABLES,
    dashboard_queries,
    iter_panels,
    load_dashboards,
    variable_queries,
)

pytestmark = pytest.mark.unit

GRAFANA = DASHBOARD_DIR.parent
EXPORTER_DIR = GRAFANA.parent / "metrics_sched" / "observability"  # where the /metrics families are defined
# ... besides the metrics plugins report, each declared as a PluginMetric in the plugin's own modules.
PLUGIN_METRIC = "PluginMetric("
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
JOB_MATCHER = 'job=~"$job"'
# The series the $job variable lists jobs from: one only metrics-sched exports (kube-scheduler has scheduler_* too,
# and a job variable built on those lists its job as well), and every replica exports from start, leader or not.
JOB_SERIES = "metrics_sched_leader"
RATE_WINDOW = "$__rate_interval"
EXPECTED_FILES = {"metrics-sched-decisions.json", "metrics-sched-sources.json", "metrics-sched-scheduler.json"}

# Every metric the dashboards may use. A rename in the exporter must be made here and in the
# dashboards together; an entry no dashboard uses any more must be dropped.
KNOWN_METRICS = frozenset({
    # decision audit
    "metrics_sched_bindings_total",
    "metrics_sched_decision_score_bucket",
    "metrics_sched_decision_score_margin_bucket",
    "metrics_sched_decision_metric_value_bucket",
    "metrics_sched_cluster_metric_quantile",
    "metrics_sched_unschedulable_reasons_total",
    "metrics_sched_bind_results_total",
    "metrics_sched_inflight_ledger_entries",
    # the rebalancer
    "metrics_sched_evictions_total",
    "metrics_sched_rebalance_candidates",
    # data sources
    "metrics_sched_source_up",
    "metrics_sched_source_last_success_timestamp_seconds",
    "metrics_sched_source_fetch_duration_seconds_bucket",
    "metrics_sched_metric_sample_age_seconds",
    "metrics_sched_metric_coverage_ratio",
    "metrics_sched_source_errors_total",
    "metrics_sched_source_dropped_samples_total",
    # scheduler (kube-scheduler names) and our own process metrics
    "scheduler_schedule_attempts_total",
    "scheduler_scheduling_attempt_duration_seconds_bucket",
    "scheduler_scheduling_algorithm_duration_seconds_bucket",
    "scheduler_pending_pods",
    "scheduler_plugin_execution_duration_seconds_bucket",
    "scheduler_pod_scheduling_attempts_bucket",
    "metrics_sched_bind_duration_seconds_bucket",
    "metrics_sched_leader",
    # preemption (kube-scheduler names)
    "scheduler_preemption_attempts_total",
    "scheduler_preemption_victims_bucket",
    # gangs (Coscheduling)
    "metrics_sched_gang_groups_pending",
    "metrics_sched_gang_timeouts_total",
    "metrics_sched_gang_wait_duration_seconds_bucket",
})

COUNTER_SUFFIXES = ("_total", "_bucket", "_sum", "_count")
RANGE_FUNCTIONS = {"rate", "increase"}
FORBIDDEN_LABELS = {"pod", "pod_name", "exported_pod"}
# label values of metrics_sched_cluster_metric_quantile the exporter publishes
CLUSTER_METRICS = {"gpu_temperature", "node_hourly_cost", "node_cpu_utilisation"}
CLUSTER_QUANTILES = {"0.1", "0.5", "0.9", "1"}
# The per-metric decision panel: one histogram labelled by metric name, one panel Grafana repeats per value of
# $metric, so a new telemetry metric reaches the dashboard without an edit.
DECISION_VALUE = "metrics_sched_decision_metric_value_bucket"
METRIC_VARIABLE_QUERY = f'label_values({DECISION_VALUE}{{job=~"$job"}}, metric)'
METRIC_MATCHER = ("metric", "=~", "$metric")
# Template variables a dashboard may define and use (besides Grafana's built-in $__ ones).
ALLOWED_VARIABLES = {"datasource", "job", "metric"}
# Gauges both replicas report (the standby keeps warm queues and caches): a panel reads the leader's only, by
# this join, or it would count every pending pod twice. Counters need no filter (the standby never schedules,
# binds or evicts: its rates are 0), and per-source health is both replicas' own (both refresh).
LEADER_FILTER = 'and on (job, instance) (metrics_sched_leader{job=~"$job"} == 1)'
LEADER_ONLY_GAUGES = {"scheduler_pending_pods", "metrics_sched_cluster_metric_quantile",
                      "metrics_sched_gang_groups_pending"}
ADDING_AGGREGATIONS = {"sum", "count", "avg"}  # these add the replicas' values up (or weigh them)
_VARIABLE_USE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")

# ---------------------------------------------------------------------------------------------
# A small PromQL lexer


@dataclass
class Selector:
    metric: str
    matchers: list[tuple[str, str, str]]  # (label, op, value)
    range: str | None  # the text inside [...] right after the selector, if any
    enclosing_call: str | None  # innermost function/aggregation whose parentheses hold the selector


@dataclass
class Parsed:
    selectors: list[Selector] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    grouping_labels: list[str] = field(default_factory=list)  # by/without/on/ignoring/group_x lists


_AGGREGATIONS = {
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
    "quantile", "limitk", "limit_ratio",
}
_FUNCTIONS = _AGGREGATIONS | {
    "abs", "absent", "absent_over_time", "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min",
    "count_over_time", "delta", "deriv", "exp", "floor", "histogram_quantile", "histogram_count",
    "histogram_sum", "histogram_fraction", "idelta", "increase", "irate", "label_replace", "label_join",
    "last_over_time", "ln", "log2", "log10", "max_over_time", "min_over_time", "quantile_over_time", "rate",
    "resets", "round", "scalar", "sort", "sort_desc", "sqrt", "stddev_over_time", "sum_over_time", "time",
    "timestamp", "vector",
}
_GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_KEYWORDS = {"and", "or", "unless", "bool", "offset"}
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_NUMBER = re.compile(r"(?:0x[0-9a-fA-F]+|[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)(?:ms|[smhdwy])*")
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_DURATION = re.compile(r"(?:[0-9]+(?:ms|[smhdwy]))+|\$__rate_interval|\$__interval|\$__range")


class PromQLError(ValueError):
    pass


def _matchers(body: str, expr: str) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    pos = 0
    while pos < len(body) and body[pos:].strip():
        m = _MATCHER.match(body, pos)
        if not m:
            raise PromQLError(f"cannot parse label matchers {{{body}}} in {expr!r}")
        out.append((m.group(1), m.group(2), m.group(3)))
        pos = m.end()
    return out


def parse_promql(expr: str) -> Parsed:
    parsed = Parsed()
    stack: list[str | None] = []  # one entry per open parenthesis: the call it belongs to, or None
    i, n = 0, len(expr)

    def skip_space(j: int) -> int:
        while j < n and expr[j].isspace():
            j += 1
        return j

    def read_braces(j: int) -> tuple[str, int]:
        end = j + 1
        in_string = False
        while end < n:
            c = expr[end]
            if in_string:
                if c == "\\":
                    end += 1
                elif c == '"':
                    in_string = False
            elif c == '"':
                in_string = True
            elif c == "}":
                return expr[j + 1:end], end + 1
            end += 1
        raise PromQLError(f"unclosed {{ in {expr!r}")

    def read_labels(j: int) -> int:
        """j is at the ( of a by/without/on/ignoring/group_x list: record the labels, return the end."""
        end = expr.find(")", j)
        if end < 0:
            raise PromQLError(f"unclosed label list in {expr!r}")
        labels = [label.strip() for label in expr[j + 1:end].split(",") if label.strip()]
        for label in labels:
            if not _IDENT.fullmatch(label):
                raise PromQLError(f"bad label {label!r} in {expr!r}")
        parsed.grouping_labels.extend(labels)
        return end + 1

    def read_range(j: int) -> tuple[str | None, int]:
        j = skip_space(j)
        if j < n and expr[j] == "[":
            end = expr.find("]", j)
            if end < 0:
                raise PromQLError(f"unclosed [ in {expr!r}")
            window = expr[j + 1:end].strip()
            if not _DURATION.fullmatch(window):
                raise PromQLError(f"bad range [{window}] in {expr!r} (subqueries are not supported here)")
            return window, end + 1
        return None, j

    while i < n:
        c = expr[i]
        if c.isspace() or c in "+-*/%^,<>=!":
            i += 1
        elif c == "(":
            stack.append(None)
            i += 1
        elif c == ")":
            if not stack:
                raise PromQLError(f"unbalanced ) in {expr!r}")
            stack.pop()
            i += 1
        elif c == '"':
            m = re.compile(r'"(?:[^"\\]|\\.)*"').match(expr, i)
            if not m:
                raise PromQLError(f"unclosed string in {expr!r}")
            i = m.end()
        elif c == "{":  # a selector without a metric name
            raise PromQLError(f"selector without a metric name in {expr!r}")
        elif (m := _NUMBER.match(expr, i)) and (c.isdigit() or c == "."):
            i = m.end()
        elif m := _IDENT.match(expr, i):
            word = m.group(0)
            j = skip_space(m.end())
            nxt = expr[j] if j < n else ""
            if word in _GROUPING:
                if nxt == "(":
                    i = read_labels(j)
                elif word in ("group_left", "group_right"):
                    i = j
                else:
                    raise PromQLError(f"{word} without a label list in {expr!r}")
            elif word in _KEYWORDS:
                i = j
            elif word in _AGGREGATIONS and (g := _IDENT.match(expr, j)) and g.group(0) in ("by", "without"):
                # `sum by (labels) (expr)`: the clause comes before the aggregation's own parentheses
                k = skip_space(g.end())
                if k >= n or expr[k] != "(":
                    raise PromQLError(f"{g.group(0)} without a label list in {expr!r}")
                k = skip_space(read_labels(k))
                if k >= n or expr[k] != "(":
                    raise PromQLError(f"{word} {g.group(0)} (...) without an argument in {expr!r}")
                parsed.functions.append(word)
                stack.append(word)
                i = k + 1
            elif nxt == "(":
                if word not in _FUNCTIONS:
                    raise PromQLError(f"unknown function {word}() in {expr!r}")
                parsed.functions.append(word)
                stack.append(word)
                i = j + 1
            else:
                matchers: list[tuple[str, str, str]] = []
                if nxt == "{":
                    body, j = read_braces(j)
                    matchers = _matchers(body, expr)
                window, j = read_range(j)
                parsed.selectors.append(Selector(word, matchers, window, stack[-1] if stack else None))
                i = j
        else:
            raise PromQLError(f"unexpected {c!r} at {i} in {expr!r}")
    if stack:
        raise PromQLError(f"unbalanced ( in {expr!r}")
    return parsed


# ---------------------------------------------------------------------------------------------
# Fixtures and helpers

DASHBOARDS = load_dashboards()


def _ids(dashboards: list[dict[str, Any]]) -> list[str]:
    return [d.get("uid", "?") for d in dashboards]


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in iter_panels(dashboard["panels"]) if p.get("type") != "row"]


def _targets(dashboard: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(panel, target) for panel in _panels(dashboard) for target in panel.get("targets", [])]


def _expressions(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target."""
    return [(f"{dashboard['uid']} / {panel['title']} / {target['refId']}", target["expr"])
            for panel, target in _targets(dashboard)]


def _variable(dashboard: dict[str, Any], name: str) -> dict[str, Any]:
    matches: list[dict[str, Any]] = [v for v in dashboard["templating"]["list"] if v["name"] == name]
    assert len(matches) == 1, f"{dashboard['uid']}: expected one ${name} variable"
    return matches[0]


def _variable_query(variable: dict[str, Any]) -> str:
    query = variable["query"]
    return query["query"] if isinstance(query, dict) else str(query)


def _variables_used(text: str) -> set[str]:
    return {m.group(1) or m.group(2) for m in _VARIABLE_USE.finditer(text)}


def _load_builder() -> ModuleType:  # grafana/ is not a package
    spec = importlib.util.spec_from_file_location("build_configmap", GRAFANA / "build_configmap.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


per_dashboard = pytest.mark.parametrize("dashboard", DASHBOARDS, ids=_ids(DASHBOARDS))

# ---------------------------------------------------------------------------------------------
# The lexer itself


def test_lexer_finds_selectors_calls_and_windows() -> None:
    parsed = parse_promql(
        'histogram_quantile(0.99, sum by (plugin, le) (rate(x_bucket{job=~"$job",a!="}"}[$__rate_interval])))'
        ' / on (job) group_left max(y{job=~"$job"}) > bool 0.5')
    assert [(s.metric, s.range, s.enclosing_call) for s in parsed.selectors] == [
        ("x_bucket", "$__rate_interval", "rate"), ("y", None, "max")]
    assert parsed.selectors[0].matchers == [("job", "=~", "$job"), ("a", "!=", "}")]
    assert parsed.grouping_labels == ["plugin", "le", "job"]
    assert parsed.functions == ["histogram_quantile", "sum", "rate", "max"]


def test_lexer_sees_a_bare_counter_and_a_wrong_call() -> None:
    parsed = parse_promql('sum(x_total{job=~"$job"}) + deriv(y_total{job=~"$job"}[5m]) - time()')
    assert [(s.metric, s.range, s.enclosing_call) for s in parsed.selectors] == [
        ("x_total", None, "sum"), ("y_total", "5m", "deriv")]
    # a selector inside plain parentheses belongs to no call
    assert parse_promql("(x_total)").selectors[0].enclosing_call is None


@pytest.mark.parametrize("bad", ["sum(x", "x)", "x{job=}", "nosuchfn(x)", "x[abc]", '{job="a"}', "rate(x[1m:10s])"])
def test_lexer_rejects_what_it_does_not_understand(bad: str) -> None:
    with pytest.raises(PromQLError):
        parse_promql(bad)


# ---------------------------------------------------------------------------------------------
# Dashboards


def test_the_three_dashboards_exist_with_unique_uids() -> None:
    assert {p.name for p in DASHBOARD_DIR.glob("*.json")} == EXPECTED_FILES
    uids = [d["uid"] for d in DASHBOARDS]
    assert len(uids) == len(set(uids)) == 3
    titles = [d["title"] for d in DASHBOARDS]
    assert len(titles) == len(set(titles))
    for path in DASHBOARD_DIR.glob("*.json"):
        # the uid is stable and names the file, so links and provisioning never drift apart
        assert json.loads(path.read_text())["uid"] == path.stem


@per_dashboard
def test_dashboard_metadata(dashboard: dict[str, Any]) -> None:
    assert dashboard["schemaVersion"] == 39
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,40}", dashboard["uid"])
    assert dashboard["title"] and dashboard.get("description")
    assert "metrics-sched" in dashboard["tags"]
    assert dashboard.get("id") is None  # provisioned dashboards must not carry a database id


@per_dashboard
def test_datasource_and_job_variables(dashboard: dict[str, Any]) -> None:
    datasource = _variable(dashboard, "datasource")
    assert datasource["type"] == "datasource" and datasource["query"] == "prometheus"
    job = _variable(dashboard, "job")
    assert job["type"] == "query"
    assert job["datasource"] == DATASOURCE
    assert _variable_query(job) == f"label_values({JOB_SERIES}, job)"
    assert job["includeAll"] is True
    # "All" = the listed (metrics-sched) jobs, as Grafana joins them; an allValue such as ".*" would match every job,
    # kube-scheduler's included, wherever both are scraped.
    assert job.get("allValue") in (None, "")
    assert job["current"]["value"] in ("$__all", ["$__all"])
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert len(names) == len(set(names))


@per_dashboard
def test_template_variables_are_known_defined_and_used(dashboard: dict[str, Any]) -> None:
    defined = {v["name"] for v in dashboard["templating"]["list"]}
    unexpected = sorted(defined - ALLOWED_VARIABLES)
    assert not unexpected, f"{dashboard['uid']}: unexpected variables {unexpected}"
    used: set[str] = set()
    for panel in _panels(dashboard):
        used |= _variables_used(panel["title"])
        if panel.get("repeat"):
            used.add(panel["repeat"])
        for target in panel["targets"]:
            used |= _variables_used(target["expr"]) | _variables_used(target.get("legendFormat", ""))
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            used |= _variables_used(_variable_query(variable))
    used -= set(BUILTINS)
    assert used <= defined, f"{dashboard['uid']}: uses undefined variables {sorted(used - defined)}"
    assert defined - {"datasource"} <= used, f"{dashboard['uid']}: unused variables {sorted(defined - used)}"
    # every variable the panels use is one the e2e helper knows how to substitute
    assert used - {"datasource"} <= {"job", *TEMPLATE_VARIABLES}


@per_dashboard
def test_metric_variable_and_the_repeated_panel(dashboard: dict[str, Any]) -> None:
    """$metric lists the metric label of the decision histogram; the panel that uses it repeats over it."""
    names = {v["name"] for v in dashboard["templating"]["list"]}
    repeated = [p for p in _panels(dashboard) if p.get("repeat")]
    decision_panels = [p for p in _panels(dashboard)
                       if any(DECISION_VALUE in t["expr"] for t in p["targets"])]
    if "metric" not in names:
        assert not repeated and not decision_panels, dashboard["uid"]
        return
    variable = _variable(dashboard, "metric")
    assert variable["type"] == "query"
    assert variable["datasource"] == DATASOURCE
    assert _variable_query(variable) == METRIC_VARIABLE_QUERY
    assert variable.get("definition", METRIC_VARIABLE_QUERY) == METRIC_VARIABLE_QUERY
    assert variable["multi"] is True and variable["includeAll"] is True
    assert variable["current"]["value"] in ("$__all", ["$__all"])
    assert variable["refresh"] == 2  # on time range change: a new metric appears without a reload
    # $metric must come after $job, which its query uses
    order = [v["name"] for v in dashboard["templating"]["list"]]
    assert order.index("job") < order.index("metric")
    assert repeated and repeated == decision_panels, f"{dashboard['uid']}: one repeated panel per decision metric"
    for panel in repeated:
        assert panel["repeat"] == "metric" and panel["repeatDirection"] == "h", panel["title"]
        assert panel.get("maxPerRow") == 3, panel["title"]
        assert "$metric" in panel["title"], panel["title"]
        assert panel["fieldConfig"]["defaults"]["unit"] in ("none", "short"), "units vary by metric"
        assert panel["gridPos"]["w"] == 24 // panel["maxPerRow"], panel["title"]
        quantiles = []
        for target in panel["targets"]:
            for selector in parse_promql(target["expr"]).selectors:
                if selector.metric == "metrics_sched_leader":
                    continue  # the leader join (LEADER_FILTER): one series per replica, no metric label
                assert METRIC_MATCHER in selector.matchers, f"{panel['title']}: {selector.metric} lacks $metric"
            if DECISION_VALUE in target["expr"]:
                quantiles.extend(re.findall(r"^histogram_quantile\(([0-9.]+),", target["expr"]))
        assert quantiles == ["0.1", "0.5", "0.9"], panel["title"]
    # no other panel reads the per-metric histogram (it would mix units across metrics)
    for panel in _panels(dashboard):
        if panel not in repeated:
            assert "$metric" not in json.dumps(panel), panel["title"]


@per_dashboard
def test_panels_have_unique_ids_titles_descriptions_and_a_place(dashboard: dict[str, Any]) -> None:
    panels = iter_panels(dashboard["panels"])
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), f"duplicate panel ids in {dashboard['uid']}: {ids}"
    cells: set[tuple[int, int]] = set()
    for panel in _panels(dashboard):
        assert panel.get("title"), panel["id"]
        assert panel.get("description"), panel["title"]
        pos = panel["gridPos"]
        assert pos["w"] > 0 and pos["h"] > 0 and pos["x"] >= 0 and pos["y"] >= 0
        assert pos["x"] + pos["w"] <= 24, f"{panel['title']} overflows the 24-column grid"
        mine = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not cells & mine, f"{panel['title']} overlaps another panel"
        cells |= mine


@per_dashboard
def test_every_panel_and_target_uses_the_datasource_variable(dashboard: dict[str, Any]) -> None:
    for panel in _panels(dashboard):
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel.get("targets"), f"{panel['title']} has no query"
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
    text = json.dumps(dashboard)
    assert "DS_PROMETHEUS" not in text and "__inputs" not in dashboard  # import-only inputs break provisioning


@per_dashboard
def test_every_panel_sets_a_unit(dashboard: dict[str, Any]) -> None:
    for panel in _panels(dashboard):
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
        assert isinstance(unit, str) and unit, f"{panel['title']} has no unit"


@per_dashboard
def test_refids_are_unique_per_panel(dashboard: dict[str, Any]) -> None:
    for panel in _panels(dashboard):
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]


@per_dashboard
def test_counters_and_histograms_are_rated(dashboard: dict[str, Any]) -> None:
    for where, expr in _expressions(dashboard):
        for selector in parse_promql(expr).selectors:
            if selector.metric.endswith(COUNTER_SUFFIXES):
                assert selector.enclosing_call in RANGE_FUNCTIONS, f"{where}: {selector.metric} not in rate/increase"
                assert selector.range == RATE_WINDOW, f"{where}: {selector.metric} needs [{RATE_WINDOW}]"
            else:
                assert selector.range is None, f"{where}: range over gauge {selector.metric}"
        # a regex over the raw text as a second opinion, independent of the lexer
        for name in re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*(?:_total|_bucket|_sum|_count))\b", expr):
            assert re.search(rf"\b(?:rate|increase)\(\s*{name}\{{[^}}]*\}}\[\$__rate_interval\]\)", expr), (
                f"{where}: {name}")


@per_dashboard
def test_every_selector_filters_by_job(dashboard: dict[str, Any]) -> None:
    for where, expr in _expressions(dashboard):
        selectors = parse_promql(expr).selectors
        assert selectors, f"{where}: no metric in {expr!r}"
        for selector in selectors:
            assert ("job", "=~", "$job") in selector.matchers, f"{where}: {selector.metric} lacks {JOB_MATCHER}"
        assert expr.count(JOB_MATCHER) == len(selectors)


@per_dashboard
def test_no_pod_labels(dashboard: dict[str, Any]) -> None:
    for where, expr in _expressions(dashboard):
        parsed = parse_promql(expr)
        labels = set(parsed.grouping_labels) | {label for s in parsed.selectors for label, _, _ in s.matchers}
        assert not labels & FORBIDDEN_LABELS, f"{where}: per-pod label in {expr!r}"
        assert "label_replace" not in parsed.functions and "label_join" not in parsed.functions
    for panel, target in _targets(dashboard):
        assert not re.search(r"\{\{\s*(?:pod|pod_name|exported_pod)\s*\}\}", target.get("legendFormat", "")), (
            panel["title"])


@per_dashboard
def test_gauges_of_both_replicas_count_the_leader_only(dashboard: dict[str, Any]) -> None:
    for where, expr in _expressions(dashboard):
        must = [s.metric for s in parse_promql(expr).selectors
                if s.metric != "metrics_sched_leader" and not s.metric.endswith(COUNTER_SUFFIXES)
                and (s.metric in LEADER_ONLY_GAUGES or s.enclosing_call in ADDING_AGGREGATIONS)]
        assert re.sub(r"\s+", " ", expr).count(LEADER_FILTER) == len(must), (
            f"{where}: {must} must read the leader only, each joined by `{LEADER_FILTER}`")


def test_metric_names_are_the_known_list() -> None:
    used: set[str] = set()
    for dashboard in DASHBOARDS:
        for where, expr in _expressions(dashboard):
            for selector in parse_promql(expr).selectors:
                assert selector.metric in KNOWN_METRICS, f"{where}: unknown metric {selector.metric}"
                used.add(selector.metric)
        for variable in dashboard["templating"]["list"]:
            if variable["type"] != "query":
                continue
            [metric] = re.findall(r"label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*[,{]", _variable_query(variable))
            assert metric in KNOWN_METRICS, f"{dashboard['uid']} / ${variable['name']}: unknown metric {metric}"
            used.add(metric)
    assert not KNOWN_METRICS - used, f"listed but unused: {sorted(KNOWN_METRICS - used)}"


def test_known_metrics_are_defined_by_the_exporter() -> None:
    """A rename on the exporter side must show up here, not as an empty panel."""
    declared = [p for p in sorted(EXPORTER_DIR.parent.rglob("*.py")) if PLUGIN_METRIC in p.read_text()]
    source = "\n".join(p.read_text() for p in [*sorted(EXPORTER_DIR.glob("*.py")), *declared])
    for metric in sorted(KNOWN_METRICS):
        family = re.sub(r"_(?:total|bucket|sum|count)$", "", metric)
        assert f'"{family}"' in source, f"{family} is not defined under {EXPORTER_DIR} nor by a plugin"
    for metric in sorted(CLUSTER_METRICS):
        assert f'"{metric}"' in source, f"cluster metric {metric} is not published by {EXPORTER_DIR}"


def test_cluster_quantile_gauge_uses_published_quantiles() -> None:
    for dashboard in DASHBOARDS:
        for where, expr in _expressions(dashboard):
            for selector in parse_promql(expr).selectors:
                if selector.metric != "metrics_sched_cluster_metric_quantile":
                    continue
                matchers = {label: (op, value) for label, op, value in selector.matchers}
                for label, allowed in (("metric", CLUSTER_METRICS), ("quantile", CLUSTER_QUANTILES)):
                    assert label in matchers, f"{where}: select one {label}"
                    op, value = matchers[label]
                    assert op in ("=", "=~"), where
                    if label == "metric" and (op, value) == ("=~", "$metric"):
                        continue  # the repeated per-metric panel: no line for a metric the gauge does not publish
                    values = set(value.split("|")) if op == "=~" else {value}
                    assert values <= allowed, f"{where}: {label} {sorted(values - allowed)} is not published"


# ---------------------------------------------------------------------------------------------
# The e2e helper


def test_dashboard_queries_substitutes_every_variable() -> None:
    queries = dashboard_queries("metrics-sched")
    expected = sum(len(_targets(d)) for d in DASHBOARDS)
    assert len(queries) == expected > 20
    assert {uid for uid, _, _ in queries} == {d["uid"] for d in DASHBOARDS}
    for uid, title, expr in queries:
        assert "$" not in expr, (uid, title, expr)
        assert 'job=~"metrics-sched"' in expr
        if DECISION_VALUE in expr:
            assert 'metric=~".*"' in expr, (uid, title, expr)  # $metric as Grafana's "All": every metric
        parsed = parse_promql(expr)  # still valid after substitution
        for selector in parsed.selectors:
            assert selector.range in (None, "30s")
    # a job regex with PromQL string metacharacters stays one string literal
    [(_, _, escaped)] = [q for q in dashboard_queries(r'a"b\c') if q[2].startswith("sum by (queue)")]
    assert r'job=~"a\"b\\c"' in escaped


def test_variable_queries_list_metrics_sched_jobs_only() -> None:
    """What tests/e2e/test_audit.py runs for the variables: the job variable reads a series kube-scheduler does not
    export (its metrics are scheduler_*, apiserver_*, rest_client_*, workqueue_*, process_* and go_*)."""
    queries = variable_queries("metrics-sched")
    assert {uid for uid, name, _ in queries if name == "job"} == {d["uid"] for d in DASHBOARDS}
    for uid, name, expr in queries:
        assert "$" not in expr, (uid, name, expr)
        parse_promql(expr)
        if name == "job":
            assert expr == f"group by (job) ({JOB_SERIES})"
    assert JOB_SERIES.startswith("metrics_sched_") and JOB_SERIES in KNOWN_METRICS


# ---------------------------------------------------------------------------------------------
# Packaging: ConfigMap and provisioning


def test_configmap_matches_the_generator() -> None:
    builder = _load_builder()
    committed = (GRAFANA / "configmap.yaml").read_text()
    assert committed == builder.render(), "grafana/configmap.yaml is stale: run python grafana/build_configmap.py"


def test_configmap_shape_and_content() -> None:
    configmap = yaml.safe_load((GRAFANA / "configmap.yaml").read_text())
    assert configmap["apiVersion"] == "v1" and configmap["kind"] == "ConfigMap"
    meta = configmap["metadata"]
    assert meta["namespace"] == "metrics-sched"
    assert meta["labels"]["grafana_dashboard"] == "1"
    assert meta["annotations"]["grafana_folder"] == "metrics-sched"
    assert set(configmap["data"]) == EXPECTED_FILES
    for name, text in configmap["data"].items():
        assert text == (DASHBOARD_DIR / name).read_text()
    # kubectl's client-side apply stores the whole object in an annotation limited to 256 KiB
    assert sum(len(t.encode()) for t in configmap["data"].values()) < 256 * 1024


def test_configmap_check_mode(tmp_path: Path) -> None:
    builder = _load_builder()
    stale = tmp_path / "configmap.yaml"
    stale.write_text("stale\n")
    assert builder.main(["--check", "--output", str(stale)]) == 1
    assert builder.main(["--output", str(stale)]) == 0
    assert builder.main(["--check", "--output", str(stale)]) == 0



def test_configmap_for_the_sidecars_namespace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--namespace: the same ConfigMap (label, folder, dashboards) where Grafana's sidecar looks, as the chart's
    dashboards.namespace renders it."""
    builder = _load_builder()
    assert builder.main(["--namespace", "monitoring", "--output", "-"]) == 0
    moved = yaml.safe_load(capsys.readouterr().out)
    committed = yaml.safe_load((GRAFANA / "configmap.yaml").read_text())
    assert moved["metadata"]["namespace"] == "monitoring"
    assert {**moved, "metadata": {**moved["metadata"], "namespace": "metrics-sched"}} == committed
    path = tmp_path / "configmap.yaml"
    assert builder.main(["--namespace", "monitoring", "--output", str(path)]) == 0
    assert builder.main(["--namespace", "monitoring", "--check", "--output", str(path)]) == 0
    assert builder.main(["--check", "--output", str(path)]) == 1  # another namespace is another file


def test_dashboard_provider_yaml() -> None:
    config = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "metrics-sched.yaml").read_text())
    assert config["apiVersion"] == 1
    [provider] = config["providers"]
    assert provider["type"] == "file"
    assert provider["folder"] == "metrics-sched"
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards/metrics-sched"
    assert provider["name"]


def test_datasource_yaml() -> None:
    config = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yaml").read_text())
    assert config["apiVersion"] == 1
    [source] = config["datasources"]
    assert source["type"] == "prometheus"
    assert source["url"].startswith("http")
    assert re.fullmatch(r"\d+s", source["jsonData"]["timeInterval"])


def test_datasource_time_interval_is_the_service_monitor_scrape_interval() -> None:
    """$__rate_interval is derived from timeInterval: it must be the interval Prometheus really scrapes at."""
    config = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yaml").read_text())
    [source] = config["datasources"]
    monitor = yaml.safe_load((GRAFANA.parent / "deploy" / "servicemonitor.yaml").read_text())
    [endpoint] = monitor["spec"]["endpoints"]
    assert source["jsonData"]["timeInterval"] == endpoint["interval"]
