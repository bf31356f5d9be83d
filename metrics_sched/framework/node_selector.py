"""Node selector terms (nodeSelector, nodeAffinity) evaluated over every node at once.

The SDK's selector masks: NodeAffinity filters and scores with them, PodTopologySpread honours a pod's node
affinity with them, VolumeBinding matches a PV's node affinity with them. Semantics follow k8s.io/component-helpers
scheduling/corev1/nodeaffinity: terms are ORed, expressions within a term ANDed; NotIn and
DoesNotExist match nodes without the label; Gt/Lt compare int64 values as Go parses them; matchFields supports
metadata.name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from metrics_sched.model.podinfo import PodInfo
from metrics_sched.state.node_table import BoolArray, NodeTable

__all__ = ["pod_required_affinity_mask", "required_affinity_mask", "selector_mask", "term_mask"]

_INT64 = re.compile(r"[+-]?[0-9]+\Z")


def _int64(value: str) -> int | None:
    """strconv.ParseInt(value, 10, 64), as labels.Requirement.Matches reads Gt/Lt operands: decimal digits
    with an optional sign, no underscores, within int64; anything else does not match."""
    if not _INT64.match(value):
        return None
    number = int(value)
    return number if -(2**63) <= number < 2**63 else None


def _compare(table: NodeTable, key: str, bound: int, greater: bool) -> BoolArray:
    """Gt/Lt over every node, exact: each distinct label value is parsed once (None: no such label)."""
    values, rows = np.unique(table.label_column(key).astype(str), return_inverse=True)
    parsed = [_int64(v) for v in values.tolist()]
    match = np.array([n is not None and (n > bound if greater else n < bound) for n in parsed], dtype=bool)
    present = table.label_exists(key)
    return np.asarray(match[rows] & present, dtype=bool)


def _expression(table: NodeTable, expr: Mapping[str, Any], *, field: bool = False) -> BoolArray:
    key = expr.get("key", "")
    operator = expr.get("operator", "")
    values: Sequence[str] = expr.get("values") or []
    if field:
        if key != "metadata.name" or operator not in ("In", "NotIn"):
            return np.zeros(table.capacity, dtype=bool)
        mask = np.zeros(table.capacity, dtype=bool)
        rows = [table.index[v] for v in values if v in table.index]
        mask[rows] = True
        return mask if operator == "In" else ~mask
    if operator == "In":
        return table.label_in(key, values)
    if operator == "NotIn":
        return ~table.label_in(key, values)
    if operator == "Exists":
        return table.label_exists(key)
    if operator == "DoesNotExist":
        return ~table.label_exists(key)
    if operator in ("Gt", "Lt") and len(values) == 1:
        bound = _int64(str(values[0]))
        if bound is not None:
            return _compare(table, key, bound, operator == "Gt")
    return np.zeros(table.capacity, dtype=bool)


def term_mask(table: NodeTable, term: Mapping[str, Any]) -> BoolArray:
    """One NodeSelectorTerm; an empty term matches nothing, like the API says."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return np.zeros(table.capacity, dtype=bool)
    mask = np.ones(table.capacity, dtype=bool)
    for expr in expressions:
        mask &= _expression(table, expr)
    for expr in fields:
        mask &= _expression(table, expr, field=True)
    return mask


def selector_mask(table: NodeTable, node_selector: Mapping[str, str]) -> BoolArray:
    mask = np.ones(table.capacity, dtype=bool)
    for key, value in node_selector.items():
        mask &= table.label_in(key, [value])
    return mask


def required_affinity_mask(table: NodeTable, node_selector: Mapping[str, str],
                           required_terms: Sequence[Mapping[str, Any]] | None) -> BoolArray:
    """Rows matching a pod's spec.nodeSelector and (if any) its required node affinity terms, ORed
    (component-helpers' RequiredNodeAffinity.Match)."""
    mask = selector_mask(table, node_selector)
    if required_terms is not None:
        any_term = np.zeros(table.capacity, dtype=bool)
        for term in required_terms:
            any_term |= term_mask(table, term)
        mask &= any_term
    return mask


def pod_required_affinity_mask(table: NodeTable, pod: PodInfo) -> BoolArray:
    required = ((pod.affinity.get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
    return required_affinity_mask(table, pod.node_selector, required)
