"""The plugin SDK: everything a plugin needs, from one import.

    from metrics_sched.framework import FilterPlugin, Filtered, Handle, PodInfo, ...

Interfaces are in `interfaces`, typed cycle state in `cycle_state`, typed args in `args`, the opt-in
batching protocol in `batchable` (and `incremental`), and the base for telemetry plugins in `metric_score`.
The engine that runs the plugins (the full-cycle and the batched-cycle runners) is `runtime`, which a
plugin never imports. A plugin package makes its plugins known through the `metrics_sched.plugins`
entry-point group (see `registry`).
"""

from metrics_sched.config.contract import FreshnessContract, OnMissing
from metrics_sched.config.errors import ArgsError
from metrics_sched.framework.args import NoArgs, parse_args
from metrics_sched.framework.batchable import Batchable, BatchScope, Reads, has_only_local_volumes
from metrics_sched.framework.cluster_index import ApiKind, ClusterIndex, ClusterIndexes, IndexChange
from metrics_sched.framework.cycle_state import (
    BINDING_ANNOTATIONS,
    EXPLANATIONS,
    CycleState,
    StateData,
    StateKey,
    annotate_binding,
    explain,
)
from metrics_sched.framework.events import ALL_EVENTS, ClusterEvent, EventHint, HintFn, QueueingHint
from metrics_sched.framework.handle import Handle, MetricReader, Services
from metrics_sched.framework.incremental import IncrementalScorer, IncrementalScores, row_positions
from metrics_sched.framework.interfaces import (
    EXTENSION_POINTS,
    MAX_PERMIT_TIMEOUT,
    BindOutcomeKind,
    BindPlugin,
    BindStatus,
    Filtered,
    FilterPlugin,
    MetricAwarePlugin,
    MetricEvidence,
    Normalized,
    PermitPlugin,
    Plugin,
    PostBindPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreScorePlugin,
    QueueSortPlugin,
    ReservePlugin,
    ScoreDetail,
    ScorePlugin,
    max_normalize,
    unchanged,
)
from metrics_sched.framework.metric_score import (
    Direction,
    MetricRead,
    MetricScorePlugin,
    MetricTerm,
    Normalization,
    Scale,
    read_metric,
)
from metrics_sched.framework.plugin_events import MetricKind, MetricSample, PluginEvents, PluginMetric
from metrics_sched.framework.status import SUCCESS, Code, Status
from metrics_sched.framework.waiting import WaitingPod, WaitingPods
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.ports import EventType, KubeObject
from metrics_sched.state.node_table import BoolArray, FloatArray, IntArray, NodeTable
from metrics_sched.telemetry.cache import MetricColumn

__all__ = [
    "ALL_EVENTS",
    "BINDING_ANNOTATIONS",
    "EXPLANATIONS",
    "EXTENSION_POINTS",
    "MAX_PERMIT_TIMEOUT",
    "SUCCESS",
    "ApiKind",
    "ArgsError",
    "BatchScope",
    "Batchable",
    "BindOutcomeKind",
    "BindPlugin",
    "BindStatus",
    "BoolArray",
    "ClusterEvent",
    "ClusterIndex",
    "ClusterIndexes",
    "Code",
    "CycleState",
    "Direction",
    "EventHint",
    "EventType",
    "FilterPlugin",
    "Filtered",
    "FloatArray",
    "FreshnessContract",
    "Handle",
    "HintFn",
    "IncrementalScorer",
    "IncrementalScores",
    "IndexChange",
    "IntArray",
    "KubeObject",
    "MetricAwarePlugin",
    "MetricColumn",
    "MetricEvidence",
    "MetricKind",
    "MetricRead",
    "MetricReader",
    "MetricSample",
    "MetricScorePlugin",
    "MetricTerm",
    "NoArgs",
    "NodeTable",
    "Normalization",
    "Normalized",
    "OnMissing",
    "PermitPlugin",
    "Plugin",
    "PluginEvents",
    "PluginMetric",
    "PodInfo",
    "PostBindPlugin",
    "PostFilterPlugin",
    "PostFilterResult",
    "PreBindPlugin",
    "PreEnqueuePlugin",
    "PreFilterPlugin",
    "PreScorePlugin",
    "QueueSortPlugin",
    "QueueingHint",
    "Reads",
    "ReservePlugin",
    "Scale",
    "ScoreDetail",
    "ScorePlugin",
    "Services",
    "StateData",
    "StateKey",
    "Status",
    "WaitingPod",
    "WaitingPods",
    "annotate_binding",
    "explain",
    "has_only_local_volumes",
    "max_normalize",
    "parse_args",
    "read_metric",
    "row_positions",
    "unchanged",
]
