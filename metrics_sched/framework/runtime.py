"""Framework: one profile's plugins, run over the whole node table for one pod at a time.

Filters narrow a boolean mask over all rows (counting, per reason, the nodes each one rejected
among those still feasible, which gives kube-scheduler's "0/N nodes are available: ..." message);
scores are normalised to 0-100 per plugin, then combined as a weighted mean in which a term with
no value for a node (NaN) drops out and the others are re-weighted for that node.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from metrics_sched.config.model import ProfileConfig
from metrics_sched.framework.interfaces import (
    BindPlugin,
    Code,
    CycleState,
    FilterPlugin,
    Handle,
    Plugin,
    PostBindPlugin,
    PreFilterPlugin,
    PreScorePlugin,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
    Status,
)
from metrics_sched.podinfo import PodInfo
from metrics_sched.state.node_table import FloatArray, IntArray, NodeTable


@dataclass
class ScoreTerm:
    plugin: str
    weight: int
    raw: FloatArray  # over the feasible rows
    normalized: FloatArray


@dataclass
class CycleResult:
    pod: PodInfo
    profile: str
    node: str | None = None
    row: int | None = None
    status: Status = field(default_factory=Status)
    feasible_rows: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    total: FloatArray = field(default_factory=lambda: np.zeros(0))
    terms: list[ScoreTerm] = field(default_factory=list)
    rejections: Counter[str] = field(default_factory=Counter)
    rejected_by: set[str] = field(default_factory=set)
    nodes_total: int = 0
    timings: list[tuple[str, str, float, str]] = field(default_factory=list)  # plugin, point, seconds, status
    cycle: CycleState = field(default_factory=CycleState)

    @property
    def scheduled(self) -> bool:
        return self.node is not None

    def release_arrays(self) -> None:
        """Drops the per-node arrays once the decision record holds what the audit needs: a result waiting
        for its bind must not keep megabytes of scores alive."""
        empty = np.zeros(0)
        self.terms = []
        self.total = empty
        self.feasible_rows = np.zeros(0, dtype=np.int64)
        self.cycle.pop("raw_metrics", None)

    def message(self) -> str:
        """kube-scheduler's FailedScheduling message shape."""
        if self.status.code == Code.ERROR:
            return f"running {self.status.plugin}: {self.status.reason}"
        if self.status.reason and not self.rejections:
            return f"0/{self.nodes_total} nodes are available: {self.status.reason}."
        parts = ", ".join(f"{count} {reason}" for reason, count in sorted(self.rejections.items()))
        return f"0/{self.nodes_total} nodes are available: {parts}."


class Framework:
    def __init__(self, profile: ProfileConfig, plugins: Mapping[str, type[Plugin]], handle: Handle) -> None:
        self.profile = profile
        self.name = profile.scheduler_name
        self.instances: dict[str, Plugin] = {}
        for point in profile.plugins:
            for ref in profile.enabled(point):
                if ref.name not in self.instances:
                    self.instances[ref.name] = plugins[ref.name](profile.plugin_args.get(ref.name, {}), handle)

        def get(point: str) -> list[Any]:
            return [self.instances[ref.name] for ref in profile.enabled(point)]

        self.queue_sort: QueueSortPlugin = get("queueSort")[0]
        self.pre_filters: list[PreFilterPlugin] = get("preFilter")
        self.filters: list[FilterPlugin] = get("filter")
        self.pre_scores: list[PreScorePlugin] = get("preScore")
        self.scores: list[tuple[ScorePlugin, int]] = [
            (self.instances[ref.name], ref.weight) for ref in profile.enabled("score")  # type: ignore[misc]
        ]
        self.reserves: list[ReservePlugin] = get("reserve")
        self.binders: list[BindPlugin] = get("bind")
        self.post_binds: list[PostBindPlugin] = get("postBind")
        self.random = random.Random()

    def events_of(self, plugin_names: set[str]) -> set[Any]:
        events: set[Any] = set()
        for name in plugin_names:
            plugin = self.instances.get(name)
            if plugin is not None:
                events |= plugin.events
        return events

    def schedule(self, pod: PodInfo, table: NodeTable) -> CycleResult:
        result = CycleResult(pod=pod, profile=self.name, nodes_total=len(table))
        cycle = result.cycle
        clock = time.perf_counter
        for pre_filter in self.pre_filters:
            started = clock()
            status = pre_filter.pre_filter(cycle, pod)
            result.timings.append((pre_filter.name, "PreFilter", clock() - started, status.code.value))
            if not status.ok:
                result.status = Status(status.code, status.reason, pre_filter.name)
                result.rejected_by.add(pre_filter.name)
                return result

        feasible = table.present[: table.capacity].copy()
        for plugin in self.filters:
            started = clock()
            verdict = plugin.filter(cycle, pod, table)
            before = feasible
            feasible = before & verdict.feasible
            rejected = int(before.sum() - feasible.sum())
            if rejected:
                result.rejected_by.add(plugin.name)
                for reason, rejected_rows in verdict.reasons.items():
                    count = int(np.count_nonzero(rejected_rows & before))
                    if count:
                        result.rejections[reason] += count
            result.timings.append((plugin.name, "Filter", clock() - started,
                                   "Unschedulable" if rejected else "Success"))
            if not feasible.any():
                break

        rows: IntArray = np.flatnonzero(feasible).astype(np.int64)
        result.feasible_rows = rows
        if rows.size == 0:
            result.status = Status(Code.UNSCHEDULABLE, "no node fits" if not result.rejections else "",
                                   ",".join(sorted(result.rejected_by)))
            return result

        for pre in self.pre_scores:
            started = clock()
            status = pre.pre_score(cycle, pod, table, rows)
            result.timings.append((pre.name, "PreScore", clock() - started, status.code.value))

        total = np.zeros(rows.size, dtype=np.float64)
        weight_sum = np.zeros(rows.size, dtype=np.float64)
        for scorer, weight in self.scores:
            started = clock()
            raw = np.asarray(scorer.score(cycle, pod, table, rows), dtype=np.float64)
            normalized = np.asarray(scorer.normalize(raw), dtype=np.float64)
            normalized = np.where(np.isfinite(normalized), np.clip(normalized, 0.0, 100.0), np.nan)
            result.terms.append(ScoreTerm(scorer.name, weight, raw, normalized))
            present = ~np.isnan(normalized)
            total += np.where(present, normalized * weight, 0.0)
            weight_sum += present * weight
            result.timings.append((scorer.name, "Score", clock() - started, "Success"))
        with np.errstate(invalid="ignore", divide="ignore"):
            total = np.where(weight_sum > 0, total / weight_sum, 0.0)
        result.total = total
        best = np.flatnonzero(total == total.max())
        pick = int(best[self.random.randrange(best.size)]) if best.size > 1 else int(best[0])
        result.row = int(rows[pick])
        result.node = table.name(result.row)
        return result
