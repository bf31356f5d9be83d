"""From one instant-query result to one Sample per node: pairing, checks, node resolution, aggregation.

Each metric is ONE instant query returning both its values and their sample timestamps:

    label_replace((<timestamp query>), "metrics_sched_part", "t", "", "")
      or label_replace((<value query>), "metrics_sched_part", "v", "", "")

`or` keeps both halves whole because the marker label differs, and both are evaluated at the same
instant, so a value and its timestamp always come from the same scrape (two separate queries could
straddle one). A value series takes the timestamp of the series with the same labels; failing that, the
oldest timestamp seen for its node. How each value series found its node (or did not) is counted per rule
for the coverage self-check (`sources`), with the label sets of the first few unmatched series.

A metric read through recording rules is one plain selector on its two record names instead
(`recorded_query`); there `__name__` tells a value from its timestamp.

Decoding: the client decodes a well-formed answer straight into `Element`s (msgspec, typed: every label a
string, the value a [time, string] pair, checked in C), so the loop below only converts and files them;
an answer with anything else in it comes as plain decoded JSON and each element is checked here (a bad
one is dropped and counted, the others kept).

A metric kept per device (`deviceLabels`) ends in adapters.prometheus.devices.split: its node values and its
device values, each as a batch.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import msgspec
import numpy as np

from adapters.prometheus.config import MetricSpec
from adapters.prometheus.devices import device_id, split
from adapters.prometheus.node_names import Match, NodeIndex
from metrics_sched.ports import Sample, SeriesMatching
from metrics_sched.telemetry.batch import DeviceBatch, DeviceKey, MetricBatch

PART_LABEL = "metrics_sched_part"
SeriesKey = frozenset[tuple[str, str]]  # a series' labels but the part marker and __name__
UNMATCHED_EXAMPLES = 10  # label sets of unmatched series kept per metric and refresh


class MalformedResult(ValueError):
    """The query answered with something other than an instant vector."""


def combined_query(query: str, timestamp_query: str) -> str:
    return (f'label_replace(({timestamp_query}), "{PART_LABEL}", "t", "", "") or '
            f'label_replace(({query}), "{PART_LABEL}", "v", "", "")')


def recorded_query(value_record: str, timestamp_record: str) -> str:
    """Both recorded series of a metric by name (record names hold no regex metacharacters)."""
    return f'{{__name__=~"{value_record}|{timestamp_record}"}}'


class Element(msgspec.Struct):
    """One instant-vector element as Prometheus sends it (its `value` time is the evaluation time: unused)."""

    metric: dict[str, str]
    value: tuple[float, str]


class RawElement(msgspec.Struct, gc=False):
    """An instant-vector element with its labels left as raw JSON (compared, not read: the reduce plan)."""

    metric: msgspec.Raw
    value: tuple[float, str]


@dataclass
class Reduced:
    samples: list[Sample] = field(default_factory=list)
    batch: MetricBatch | None = None  # the values as one batch instead of samples (adapters.prometheus.plan)
    devices: DeviceBatch | None = None  # a per-device metric's device values (its node values: `batch`)
    dropped: Counter[str] = field(default_factory=Counter)
    unmatched: int = 0
    matched_by_rule: Counter[str] = field(default_factory=Counter)
    unmatched_examples: list[dict[str, str]] = field(default_factory=list)

    def matching(self) -> SeriesMatching:
        return SeriesMatching(matched=dict(self.matched_by_rule), unmatched=self.unmatched,
                              unmatched_examples=tuple(self.unmatched_examples))


def refusal(raw: float, metric: MetricSpec) -> str | None:
    """Why a raw value cannot be used, or None. Checked before scaling: thresholds are in source units."""
    if math.isnan(raw):
        return "nan"
    if math.isinf(raw):
        return "inf"
    if raw > metric.sentinel_above:
        return "sentinel"
    if raw < 0 and not metric.allow_negative:
        return "negative"
    return None


def _parse(element: object) -> tuple[dict[str, str], float] | None:
    """(labels, value) of one vector element (its time is the evaluation time: useless), or None. The labels
    are the caller's to change: the decoded dict itself when it is well-formed (no copy per element), else a
    copy with every label as a string."""
    if type(element) is dict:
        labels, pair = element.get("metric"), element.get("value")
        if type(labels) is dict and type(pair) is list and len(pair) == 2:
            try:
                value = float(pair[1])
            except (TypeError, ValueError):
                return None
            try:
                "".join(labels.values())  # TypeError unless every label value is a string (keys always are)
            except TypeError:
                return {str(k): str(v) for k, v in labels.items()}, value
            return labels, value
    if not isinstance(element, Mapping):
        return None
    labels, pair = element.get("metric"), element.get("value")
    if not isinstance(labels, Mapping) or not isinstance(pair, Sequence) or isinstance(pair, str) or len(pair) != 2:
        return None
    try:
        return {str(k): str(v) for k, v in labels.items()}, float(pair[1])
    except (TypeError, ValueError):
        return None


def reduce_result(metric: MetricSpec, result: object, nodes: NodeIndex) -> Reduced:
    """`result`: the `data.result` list, of `Element`s or of plain decoded JSON (see the module docstring)."""
    if not isinstance(result, list):
        raise MalformedResult(f"expected an instant vector, got {type(result).__name__}")
    out = Reduced()
    stamps: dict[SeriesKey, float] = {}
    oldest_by_node: dict[str, float] = {}
    # (labels without the part marker and __name__, their key, value, __name__) of each value series
    values: list[tuple[dict[str, str], SeriesKey, float, str | None]] = []
    # The node of each timestamp series, by its key: its value series (same labels) needs no second lookup.
    matches: dict[SeriesKey, Match] = {}
    malformed = 0
    resolve, node_labels, isfinite = nodes.resolve_cached, metric.node_labels, math.isfinite
    # Read through recording rules, the record's name says which half a series is.
    part_by_name = {metric.recorded[0]: "v", metric.recorded[1]: "t"} if metric.recorded else {}
    labels: dict[str, str]
    for element in result:
        if type(element) is Element:
            labels = element.metric
            try:
                value = float(element.value[1])
            except ValueError:
                malformed += 1
                continue
        else:
            parsed = _parse(element)
            if parsed is None:
                malformed += 1
                continue
            labels, value = parsed
        # A value and its timestamp series pair up by every other label (not the marker, nor __name__, which
        # timestamp() drops).
        part = labels.pop(PART_LABEL, None)
        name = labels.pop("__name__", None)
        if part is None and name is not None:
            part = part_by_name.get(name)
        if part == "v":
            values.append((labels, frozenset(labels.items()), value, name))
        elif part == "t":
            if isfinite(value):
                key = frozenset(labels.items())
                stamps[key] = value
                match = matches[key] = resolve(labels, node_labels)
                node = match.node
                if node is not None:
                    oldest = oldest_by_node.get(node)
                    if oldest is None or value < oldest:
                        oldest_by_node[node] = value
        else:
            malformed += 1
    if malformed:
        out.dropped["malformed"] = malformed
    if result and malformed == len(result):
        # A scalar, a string or a range vector: the query itself is wrong, not a few of its series.
        raise MalformedResult(f"expected an instant vector, got {str(result)[:80]}")

    per_node: dict[str, list[tuple[float, float]]] = defaultdict(list)
    sentinel = metric.sentinel_above
    device_labels = metric.device_labels
    # Per device: each node and device numbered by its first series (as the plan does), and the usable points.
    node_ids: dict[str, int] = {}
    key_ids: dict[DeviceKey, int] = {}
    usable: list[tuple[int, int, float, float]] = []
    for labels, key, raw, name in values:
        match = matches.get(key) or resolve(labels, node_labels)
        node = match.node
        if node is None:
            out.unmatched += 1
            out.dropped["unknown_node" if match.had_label else "no_node_label"] += 1
            if len(out.unmatched_examples) < UNMATCHED_EXAMPLES:
                out.unmatched_examples.append({"__name__": name, **labels} if name is not None else dict(labels))
            continue
        out.matched_by_rule[match.rule] += 1
        node_id = device = -1
        if device_labels:
            node_id = node_ids.setdefault(node, len(node_ids))
            found = device_id(labels, device_labels)
            if found is None:
                out.dropped["no_device_label"] += 1
            else:
                device = key_ids.setdefault((node, found), len(key_ids))
        # Within [0, sentinel] nothing can be wrong (NaN fails every comparison): the checks only for the rest.
        if not 0.0 <= raw <= sentinel and (reason := refusal(raw, metric)) is not None:
            out.dropped[reason] += 1
            continue
        observed = stamps.get(key, oldest_by_node.get(node))
        if observed is None:
            out.dropped["no_timestamp"] += 1
            continue
        if device_labels:
            usable.append((node_id, device, raw * metric.scale, observed))
        else:
            per_node[node].append((raw * metric.scale, observed))

    if device_labels:
        columns = np.array(usable, dtype=np.float64).reshape(len(usable), 4)
        out.batch, out.devices = split(
            metric.name, metric.aggregation, list(node_ids), columns[:, 0].astype(np.intp), list(key_ids),
            columns[:, 1].astype(np.intp), columns[:, 2].copy(), columns[:, 3].copy())
        return out
    for node, points in per_node.items():
        value, observed = aggregate(metric.aggregation, points)
        out.samples.append(Sample(metric=metric.name, node=node, value=value, observed_at=observed))
    return out


def aggregate(how: str, points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(value, observed_at) of a node's (value, timestamp) points. A combined value is as old as its oldest
    input; `last` is the newest point, with its own time."""
    if len(points) == 1:  # one series per node (an aggregating query): nothing to combine
        return points[0]
    if how == "last":
        return max(points, key=lambda p: p[1])
    values = [v for v, _ in points]
    oldest = min(t for _, t in points)
    if how == "max":
        return max(values), oldest
    if how == "min":
        return min(values), oldest
    if how == "sum":
        return math.fsum(values), oldest
    if how == "avg":
        return math.fsum(values) / len(values), oldest
    raise ValueError(f"unknown aggregation {how!r}")
