"""What-if replay: re-score recorded decisions with another config's weights and plugin args.

A placement record holds, for its top candidates (audit.topCandidates, 5 by default), every score term's
normalised and raw value and the metric values behind it (sample, age, in-flight part). Replay recomputes each
candidate's total from those terms under the new profile of the same name (or the new config's first profile):

- a plugin's weight is the new one; a plugin the new profile does not score drops out of the total;
- a telemetry (MetricScorePlugin) term is normalised again from the recorded values (sample + in-flight part)
  with the new args' scale, when the record allows it: its metrics are the ones the new args read, no
  `perResource` (the node's allocatable is not recorded), and for `minmax` only when every feasible node was
  recorded (the bounds are the candidates'); otherwise the recorded normalised value is kept;
- any other term keeps its recorded normalised value; a plugin the record does not hold cannot be replayed
  (counted under `unreplayable`).

What cannot be replayed: filters are not re-run (a node the recording filtered out stays out, one it admitted
stays in), and only the recorded candidates compete: a node outside the recorded top N never wins a replay.
Records without candidates (unschedulable, errors) and evictions are skipped.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from metrics_sched.config.model import SchedulerConfig
from metrics_sched.framework.handle import Services
from metrics_sched.framework.interfaces import Plugin
from metrics_sched.framework.metric_score import MetricScorePlugin, MetricTerm
from metrics_sched.framework.runtime import Framework
from metrics_sched.framework.scoring import nan_weighted_mean
from metrics_sched.ports import EventSeries, KubeObject, SchedulingEvent
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.telemetry.cache import MetricCache
from metrics_sched.telemetry.ledger import InFlightLedgerStore

__all__ = ["DecisionReplay", "ReplayReport", "plans_of", "read_jsonl", "replay"]

# The result of records that placed (or, for a shadow profile, would have placed) a pod.
REPLAYED_RESULTS = frozenset({"scheduled", "waiting", "shadow"})


@dataclass(frozen=True)
class PluginPlan:
    """How the new config scores one plugin: its weight, and for a telemetry plugin its metric terms."""

    weight: int
    metric_terms: tuple[MetricTerm, ...] | None = None


ProfilePlan = Mapping[str, PluginPlan]


class _NoWrites:
    """A PodWriter for plugins built only to read their parsed terms: replay never writes anything."""

    def bind(self, namespace: str, name: str, uid: str, node: str,
             annotations: Mapping[str, str] | None = None) -> None:
        raise RuntimeError("replay binds nothing")

    def get_pod(self, namespace: str, name: str) -> KubeObject | None:
        raise RuntimeError("replay reads no pod")

    def record_event(self, event: SchedulingEvent, series: EventSeries | None = None) -> str:
        raise RuntimeError("replay writes no event")

    def update_event_series(self, event: SchedulingEvent, name: str, series: EventSeries) -> None:
        raise RuntimeError("replay writes no event")

    def set_pod_scheduled_condition(self, namespace: str, name: str, *, status: Literal["True", "False"],
                                    reason: str, message: str, resource_version: str | None = None) -> None:
        raise RuntimeError("replay writes no condition")


def plans_of(config: SchedulerConfig, plugins: Mapping[str, type[Plugin]]) -> dict[str, ProfilePlan]:
    """Per profile name, its score plugins' weights and metric terms, from frameworks built offline (the
    plugins parse their args as the scheduler's would; nothing runs)."""
    services = Services(cluster=ClusterState(), metrics=MetricCache(config.metrics), ledger=InFlightLedgerStore(),
                        pod_writer=_NoWrites())
    return {p.scheduler_name: _plan(Framework(p, plugins, services)) for p in config.profiles}


def _plan(framework: Framework) -> ProfilePlan:
    plan: dict[str, PluginPlan] = {}
    for scorer, weight in framework.scores:
        terms = tuple(scorer.terms()) if isinstance(scorer, MetricScorePlugin) else None
        plan[scorer.name] = PluginPlan(weight, terms)
    return plan


@dataclass
class DecisionReplay:
    id: int
    pod: str
    profile: str
    before: str  # the recorded winner
    after: str  # the replay's winner
    before_total: float
    after_total: float
    renormalised: list[str] = field(default_factory=list)  # plugins normalised again from the recorded values

    @property
    def changed(self) -> bool:
        return self.before != self.after


@dataclass
class ReplayReport:
    decisions: list[DecisionReplay] = field(default_factory=list)
    skipped: int = 0  # records without candidates, evictions
    # plugin -> how many replayed decisions the new config scores with it but the record does not hold
    unreplayable: dict[str, int] = field(default_factory=dict)
    # metric -> the winners' recorded values (the sample, without the in-flight part), before and after
    before_metrics: dict[str, list[float]] = field(default_factory=dict)
    after_metrics: dict[str, list[float]] = field(default_factory=dict)

    @property
    def changed(self) -> int:
        return sum(1 for d in self.decisions if d.changed)

    @property
    def changed_share(self) -> float:
        return self.changed / len(self.decisions) if self.decisions else 0.0

    def mean(self, metric: str, when: Literal["before", "after"]) -> float | None:
        values = (self.before_metrics if when == "before" else self.after_metrics).get(metric, [])
        return sum(values) / len(values) if values else None

    def metrics(self) -> list[str]:
        return sorted(set(self.before_metrics) | set(self.after_metrics))

    def as_dict(self) -> dict[str, Any]:
        return {
            "replayed": len(self.decisions), "changed": self.changed, "changed_share": self.changed_share,
            "skipped": self.skipped, "unreplayable": dict(self.unreplayable),
            "winners_mean": {m: {"before": self.mean(m, "before"), "after": self.mean(m, "after")}
                             for m in self.metrics()},
            "decisions": [{"id": d.id, "pod": d.pod, "profile": d.profile, "before": d.before, "after": d.after,
                           "changed": d.changed, "before_total": d.before_total, "after_total": d.after_total,
                           "renormalised": d.renormalised} for d in self.decisions],
        }


def read_jsonl(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """Records from a JSONL export (one JSON object a line; blank lines skipped). Raises ValueError naming the
    line of a bad one."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {number}: not JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise ValueError(f"line {number}: not a decision record (a JSON object)")
        yield record


def replay(records: Iterable[Mapping[str, Any]], plans: Mapping[str, ProfilePlan]) -> ReplayReport:
    """Re-scores every placement record with candidates (see the module's docstring for what is replayed)."""
    report = ReplayReport()
    default = next(iter(plans.values()))
    for record in records:
        candidates = record.get("candidates") or []
        if record.get("kind", "placement") != "placement" or record.get("result") not in REPLAYED_RESULTS \
                or not candidates:
            report.skipped += 1
            continue
        report.decisions.append(_replay_one(record, candidates, plans.get(str(record.get("profile")), default),
                                            report))
    return report


def _replay_one(record: Mapping[str, Any], candidates: list[dict[str, Any]], plan: ProfilePlan,
                report: ReplayReport) -> DecisionReplay:
    size = len(candidates)
    every_feasible = int(record.get("feasible") or 0) <= size
    recorded = {t["plugin"] for t in candidates[0]["terms"]}
    for plugin in plan:
        if plugin not in recorded:
            report.unreplayable[plugin] = report.unreplayable.get(plugin, 0) + 1
    parts: list[np.ndarray[Any, np.dtype[np.float64]]] = []
    weights: list[float] = []
    renormalised: list[str] = []
    for position, term in enumerate(candidates[0]["terms"]):
        plugin_plan = plan.get(term["plugin"])
        if plugin_plan is None:
            continue
        column = [c["terms"][position] for c in candidates]
        scores = _renormalised(column, plugin_plan, every_feasible)
        if scores is None:
            scores = np.array([_num(t["normalized"]) for t in column], dtype=np.float64)
        else:
            renormalised.append(term["plugin"])
        parts.append(scores)
        weights.append(plugin_plan.weight)
    totals = nan_weighted_mean(parts, weights, size, empty=0.0)
    # Ties go to the recorded winner (rank 0), then to the better-ranked candidate: a replay changes a placement
    # only when the new scores say so.
    pick = int(np.flatnonzero(totals == totals.max())[0])
    before, after = candidates[0], candidates[pick]
    _add_metrics(report.before_metrics, before)
    _add_metrics(report.after_metrics, after)
    return DecisionReplay(int(record.get("id") or 0), str(record.get("pod")), str(record.get("profile")),
                          before["node"], after["node"], float(before["total"]), round(float(totals[pick]), 4),
                          renormalised)


def _num(value: Any) -> float:
    return math.nan if value is None else float(value)


def _renormalised(column: list[dict[str, Any]], plan: PluginPlan, every_feasible: bool
                  ) -> np.ndarray[Any, np.dtype[np.float64]] | None:
    """The term's 0-100 scores under the new args from the recorded metric values, or None if the record
    cannot reproduce them (see the module's docstring)."""
    terms = plan.metric_terms
    if terms is None or not terms:
        return None
    recorded = [m["metric"] for m in column[0]["metrics"]]
    if recorded != [t.metric for t in terms]:
        return None
    if any(t.per_resource for t in terms) or (not every_feasible and any(t.scale.method == "minmax" for t in terms)):
        return None
    parts = []
    for index, term in enumerate(terms):
        values = np.array([_num(c["metrics"][index]["value"]) + (_num(c["metrics"][index]["in_flight"])
                                                                 if term.ledger and c["metrics"][index]["in_flight"]
                                                                 is not None else 0.0)
                           for c in column], dtype=np.float64)
        parts.append(term.scale.apply(values, term.better))
    # onMissing: lowest scored a missing value 0 when recorded; its NaN here would drop the term instead. Such a
    # candidate keeps its recorded score for this plugin.
    combined = nan_weighted_mean(parts, [t.weight for t in terms], len(column))
    recorded_scores = np.array([_num(c["normalized"]) for c in column], dtype=np.float64)
    missing = np.array([any(m["value"] is None for m in c["metrics"]) for c in column])
    return np.where(missing, recorded_scores, combined)


def _add_metrics(into: dict[str, list[float]], candidate: Mapping[str, Any]) -> None:
    seen: set[str] = set()
    for term in candidate["terms"]:
        for metric in term["metrics"]:
            name = metric["metric"]
            if name in seen or metric["value"] is None:
                continue
            seen.add(name)
            into.setdefault(name, []).append(float(metric["value"]))
