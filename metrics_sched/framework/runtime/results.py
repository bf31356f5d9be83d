"""What one attempt of the scheduling cycle produced (CycleResult, the audit's source), its score terms and filter
trace, and the what-if answer: the records both cycle runners fill in and the scheduler, the audit and the binder
read."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from metrics_sched.framework.cycle_state import CycleState
from metrics_sched.framework.interfaces import MetricEvidence
from metrics_sched.framework.status import Code, Status
from metrics_sched.framework.waiting import WaitingPod
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.state.node_table import BoolArray, FloatArray, IntArray

__all__ = ["CycleResult", "FilterStep", "ScoreTerm", "WhatIf", "first_rejecter"]


@dataclass
class ScoreTerm:
    plugin: str
    weight: int
    raw: FloatArray  # over the feasible rows
    normalized: FloatArray
    evidence: tuple[MetricEvidence, ...] = ()


class FilterStep(NamedTuple):
    """One filter that ran in a cycle (CycleResult.filter_trace), its arrays kept as references (the cycle computes
    them anyway): its name, the feasible mask after it, and its reasons (Filtered.reasons: what a row it turned down
    first is counted under)."""

    name: str
    feasible: BoolArray
    reasons: dict[str, BoolArray]


@dataclass
class CycleResult:
    """Everything one attempt produced; the audit reads these typed fields, never the plugins' state."""

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
    nominated_node: str | None = None  # from PostFilter
    post_filter_message: str = ""  # what a successful PostFilter said (e.g. "preemption: ..."), appended to message()
    assumed: bool = False
    waiting: WaitingPod | None = None  # held at Permit (status WAIT) until Framework.hold() starts the wait
    skipped: set[str] = field(default_factory=set)  # plugins whose PreFilter/PreScore said Skip
    filter_skipped: frozenset[str] = frozenset()  # those whose PreFilter said Skip (set when scoring begins)
    bind_retries: int = 0  # binding cycles rerun because the bind's outcome was unknown
    summary: str = ""  # set by the audit: the Scheduled event's text
    # Each filter that ran: which filter turned a row down first and under which reasons, for opportunistic
    # batching's check of a changed row that was not a candidate.
    filter_trace: list[FilterStep] = field(default_factory=list)

    def release_arrays(self) -> None:
        """Drops the per-node arrays once the decision record holds what the audit needs: a result waiting
        for its bind must not keep megabytes of scores alive."""
        self.terms = []
        self.total = np.zeros(0)
        self.feasible_rows = np.zeros(0, dtype=np.int64)
        self.filter_trace = []

    def first_rejecter(self, row: int) -> int | None:
        """first_rejecter() in this cycle's filter_trace (None once the trace is released)."""
        return first_rejecter(self.filter_trace, row)

    def message(self) -> str:
        """Why the pod is not bound, in kube-scheduler's FailedScheduling shape."""
        if self.status.code == Code.ERROR:
            return f"running {self.status.plugin}: {self.status.reason}"
        if self.node is not None:  # chosen, then turned down by Reserve, Permit, PreBind or Bind
            return f"{self.status.plugin}: {self.status.reason}"
        if self.status.reason and not self.rejections:
            return f"0/{self.nodes_total} nodes are available: {self.status.reason}."
        parts = ", ".join(f"{count} {reason}" for reason, count in sorted(self.rejections.items()))
        tail = f" {self.post_filter_message}" if self.post_filter_message else ""
        return f"0/{self.nodes_total} nodes are available: {parts}.{tail}"


@dataclass
class WhatIf:
    """Framework.what_if's answer. status not ok: a PreFilter or PreScore turned the pod down (nothing scored)."""

    status: Status
    feasible: IntArray  # the rows every filter passes
    rows: IntArray  # the rows scored: the feasible ones and those asked for, ascending
    total: FloatArray  # weighted totals (0-100) over `rows`, as the cycle computes them
    rejections: Counter[str]  # reason -> nodes, as in CycleResult




def first_rejecter(trace: Sequence[FilterStep], row: int) -> int | None:
    """The position in a filter trace (CycleResult.filter_trace) of the filter that turned `row` down first (the one
    its rejection is counted under), or None when none did."""
    for position, step in enumerate(trace):
        if not step.feasible[row]:
            return position
    return None

