"""Node selector terms (nodeSelector, nodeAffinity) evaluated over every node at once.

Shared by NodeAffinity; not a plugin itself. Semantics follow k8s.io/component-helpers
scheduling/corev1/nodeaffinity: terms are ORed, expressions within a term ANDed; NotIn and
DoesNotExist match nodes without the label; Gt/Lt compare integers; matchFields supports
metadata.name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from metrics_sched.state.node_table import BoolArray, NodeTable


def _as_int(value: object) -> float:
    try:
        return float(int(str(value)))
    except (TypeError, ValueError):
        return float("nan")


_to_number = np.frompyfunc(_as_int, 1, 1)


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
        bound = _as_int(values[0])
        numbers = np.asarray(_to_number(table.label_column(key)), dtype=np.float64)
        with np.errstate(invalid="ignore"):
            return numbers > bound if operator == "Gt" else numbers < bound
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
