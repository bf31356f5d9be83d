"""Which nodes a slice (or, with perDeviceNodeSelection, a device) serves: upstream's `NodeMatches`.

A node selector is parsed once (per slice version) the way component-helpers' `nodeaffinity.NewNodeSelector`
does, parse errors kept for the first match attempt (upstream reports them then, as a fatal allocation error);
matching follows `LazyErrorNodeSelector.Match`: terms ORed, an empty term matches nothing, label requirements
as `labels.Requirement.Matches`, fields only `metadata.name` (ignored for a node without a name).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["NodeSelectorError", "ParsedNodeSelector", "node_matches", "parse_node_selector"]

_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_INT64 = re.compile(r"[+-]?[0-9]+\Z")
_LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


class NodeSelectorError(ValueError):
    """A node selector upstream's parser refuses (API validation normally prevents it)."""


def _int64(value: str) -> int | None:
    if not _INT64.match(value):
        return None
    number = int(value)
    return number if -(2**63) <= number < 2**63 else None


def _label_key_error(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _SUBDOMAIN.match(prefix)):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if not name or len(name) > 63 or not _NAME.match(name):
        return ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                "alphanumeric character")
    return None


def _label_value_error(value: str) -> str | None:
    if value and (len(value) > 63 or not _NAME.match(value)):
        return ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
                "must start and end with an alphanumeric character")
    return None


@dataclass(frozen=True, slots=True)
class _Requirement:
    key: str
    operator: str
    values: frozenset[str]
    bound: int  # Gt/Lt operand

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == "In":
            return self.key in labels and labels[self.key] in self.values
        if op == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if op == "Exists":
            return self.key in labels
        if op == "DoesNotExist":
            return self.key not in labels
        if self.key not in labels:
            return False
        have = _int64(labels[self.key])
        if have is None:
            return False
        return have > self.bound if op == "Gt" else have < self.bound


@dataclass(frozen=True, slots=True)
class _Term:
    labels: tuple[_Requirement, ...]
    fields: tuple[tuple[str, str, str], ...]  # (key, "In"|"NotIn", value)
    errors: tuple[str, ...]

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        if any(not r.matches(labels) for r in self.labels):
            return False
        if self.fields and node_name:
            for key, op, value in self.fields:
                have = node_name if key == "metadata.name" else ""
                if (have == value) != (op == "In"):
                    return False
        return True


@dataclass(frozen=True, slots=True)
class ParsedNodeSelector:
    terms: tuple[_Term, ...]
    error: str | None  # all parse errors, joined like an aggregate error

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        return any(term.matches(node_name, labels) for term in self.terms)


def _parse_expressions(exprs: Sequence[Mapping[str, Any]], path: str) -> tuple[list[_Requirement], list[str]]:
    requirements: list[_Requirement] = []
    errors: list[str] = []
    for i, expr in enumerate(exprs):
        p = f"{path}[{i}]"
        key, op = str(expr.get("key") or ""), str(expr.get("operator") or "")
        values = [str(v) for v in expr.get("values") or []]
        if op not in _LABEL_OPERATORS:
            supported = ", ".join(f'"{o}"' for o in _LABEL_OPERATORS)
            errors.append(f'{p}.operator: Unsupported value: "{op}": supported values: {supported}')
            continue
        problem = _label_key_error(key)
        if problem is not None:
            errors.append(f'{p}.key: Invalid value: "{key}": {problem}')
            continue
        bound = 0
        if op in ("In", "NotIn") and not values:
            errors.append(f"{p}.values: Required value: for 'in', 'notin' operators, values set can't be empty")
            continue
        if op in ("Exists", "DoesNotExist") and values:
            errors.append(f"{p}.values: Forbidden: values set must be empty for exists and does not exist")
            continue
        if op in ("Gt", "Lt"):
            parsed = _int64(values[0]) if len(values) == 1 else None
            if len(values) != 1:
                errors.append(f"{p}.values: Required value: for 'Gt', 'Lt' operators, exactly one value is required")
                continue
            if parsed is None:
                errors.append(f"{p}.values[0]: Invalid value: \"{values[0]}\": for 'Gt', 'Lt' operators, the "
                              "value must be an integer")
                continue
            bound = parsed
        bad = next((v for v in values if _label_value_error(v) is not None), None)
        if bad is not None:
            errors.append(f'{p}.values: Invalid value: "{bad}": {_label_value_error(bad)}')
            continue
        requirements.append(_Requirement(key, op, frozenset(values), bound))
    return requirements, errors


def _parse_fields(exprs: Sequence[Mapping[str, Any]], path: str) -> tuple[list[tuple[str, str, str]], list[str]]:
    fields: list[tuple[str, str, str]] = []
    errors: list[str] = []
    for i, expr in enumerate(exprs):
        p = f"{path}[{i}]"
        key, op = str(expr.get("key") or ""), str(expr.get("operator") or "")
        values = [str(v) for v in expr.get("values") or []]
        if op not in ("In", "NotIn"):
            errors.append(f'{p}.operator: Unsupported value: "{op}": supported values: "In", "NotIn"')
        elif len(values) != 1:
            errors.append(f"{p}.values: Invalid value: {values}: must have one element")
        else:
            fields.append((key, op, values[0]))
    return fields, errors


def parse_node_selector(selector: Mapping[str, Any]) -> ParsedNodeSelector:
    terms: list[_Term] = []
    errors: list[str] = []
    for i, term in enumerate(selector.get("nodeSelectorTerms") or []):
        exprs = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not exprs and not fields:
            continue  # an empty term selects nothing
        path = f"nodeSelectorTerms[{i}]"
        reqs, req_errors = _parse_expressions(exprs, f"{path}.matchExpressions")
        flds, fld_errors = _parse_fields(fields, f"{path}.matchFields")
        term_errors = tuple(req_errors + fld_errors)
        errors.extend(term_errors)
        terms.append(_Term(tuple(reqs), tuple(flds), term_errors))
    if not errors:
        error = None
    elif len(errors) == 1:
        error = errors[0]
    else:
        error = "[" + ", ".join(errors) + "]"
    return ParsedNodeSelector(tuple(terms), error)


def node_matches(node_name: str, labels: Mapping[str, str], name_to_match: str, all_nodes: bool,
                 selector: ParsedNodeSelector | None) -> bool:
    """Upstream's NodeMatches; raises NodeSelectorError with its "failed to parse node selector" text."""
    if name_to_match:
        return node_name == name_to_match
    if all_nodes:
        return True
    if selector is not None:
        if selector.error is not None:
            raise NodeSelectorError(f"failed to parse node selector: {selector.error}")
        return selector.matches(node_name, labels)
    return False
