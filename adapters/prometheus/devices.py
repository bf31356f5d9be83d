"""A per-device metric's answer split into its node values and its device values, the same way on both paths.

A metric with `deviceLabels` is queried one series per (node, device) (presets: aggregated `by` the node labels
and the device labels; see presets.Preset.render for why one query and not a second one). Each series names its
device by the first of `deviceLabels` it carries (e.g. `UUID`, else `gpu`); the node's value is the metric's
`aggregation` over its series (the hottest GPU, as the per-node query gives it), stamped with its oldest
series, and each device's value is its own series' with its own stamp. A series without any of the labels
still counts for its node's value (and is counted as `no_device_label`).

`split` is what both reductions end with (series.reduce_result, the general way, and plan.ReducePlan.apply,
vectorised): the same numpy folds in the same order, so both give the same doubles.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from adapters.prometheus.presets import Aggregation
from metrics_sched.state.node_table import FloatArray
from metrics_sched.telemetry.batch import DeviceBatch, DeviceKey, MetricBatch

__all__ = ["device_id", "fold", "split"]

IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]


def device_id(labels: Mapping[str, str], device_labels: Sequence[str]) -> str | None:
    """The first of `device_labels` the series carries (an empty label is no label, as in Prometheus)."""
    for name in device_labels:
        value = labels.get(name)
        if value:
            return value
    return None


def fold(how: Aggregation, group: IntArray, values: FloatArray, observed: FloatArray,
         groups: int) -> tuple[FloatArray, FloatArray, IntArray]:
    """Per group (0..groups-1), the aggregation of its points' values and their time (the oldest, or for `last`
    the newest point's own), and how many points it had (0: NaN value). Points in the order given; `last` takes
    the first of equally new points, as series.aggregate does."""
    counts = np.bincount(group, minlength=groups)
    out = np.full(groups, np.nan)
    if how == "last":
        stamp = np.full(groups, np.nan)
        if len(group):
            # By group, then time, then position backwards: each group's last entry is its newest, earliest point.
            order = np.lexsort((-np.arange(len(group)), observed, group))
            ends = order[np.flatnonzero(np.r_[group[order][1:] != group[order][:-1], True])]
            out[group[ends]] = values[ends]
            stamp[group[ends]] = observed[ends]
        return out, stamp, counts
    oldest = np.full(groups, np.inf)
    np.minimum.at(oldest, group, observed)
    if how == "max":
        acc = np.full(groups, -np.inf)
        np.maximum.at(acc, group, values)
    elif how == "min":
        acc = np.full(groups, np.inf)
        np.minimum.at(acc, group, values)
    elif how in ("sum", "avg"):
        acc = np.bincount(group, weights=values, minlength=groups)
        if how == "avg":
            acc = acc / np.maximum(counts, 1)
    else:
        raise ValueError(f"unknown aggregation {how!r}")
    had = counts > 0
    out[had] = acc[had]
    oldest[~had] = np.nan
    return out, oldest, counts


def split(metric: str, how: Aggregation, nodes: list[str], node_of: IntArray, keys: list[DeviceKey],
          device_of: IntArray, values: FloatArray, observed: FloatArray) -> tuple[MetricBatch, DeviceBatch]:
    """The node batch and the device batch of a per-device metric's usable points (scaled values, their times):
    point i belongs to node `nodes[node_of[i]]` and device `keys[device_of[i]]` (-1: none). Nodes and devices
    without a point are left out; when none is, the lists given are kept (the same objects refresh after refresh:
    the cache recognises them)."""
    node_values, node_times, node_counts = fold(how, node_of, values, observed, len(nodes))
    if not node_counts.all():
        had = node_counts > 0
        nodes = [node for node, kept in zip(nodes, had.tolist(), strict=True) if kept]
        node_values, node_times = node_values[had], node_times[had]
    named = device_of >= 0
    if not named.all():
        device_of, values, observed = device_of[named], values[named], observed[named]
    device_values, device_times, device_counts = fold(how, device_of, values, observed, len(keys))
    if not device_counts.all():
        had = device_counts > 0
        keys = [key for key, kept in zip(keys, had.tolist(), strict=True) if kept]
        device_values, device_times = device_values[had], device_times[had]
    return (MetricBatch(metric, nodes, node_values, node_times),
            DeviceBatch(metric, keys, device_values, device_times))
