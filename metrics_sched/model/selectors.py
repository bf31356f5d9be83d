"""Label selectors as k8s.io/apimachinery parses and matches them (metav1.LabelSelectorAsSelector).

A selector is an immutable, hashable value, so equal selectors of many pods (the replicas of one
Deployment) share one entry in the cluster state's count indexes. Two special values follow upstream:

- `NOTHING`: a nil selector (`labelSelector` absent) matches no object;
- `EVERYTHING`: an empty selector (`{}`) matches every object; `empty` is true for it (labels.Selector.Empty()).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["EVERYTHING", "NOTHING", "LabelSelector", "Requirement", "SelectorError"]

_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


class SelectorError(ValueError):
    """A selector the API server would not have accepted (an unknown operator, values where none belong)."""


@dataclass(frozen=True, order=True)
class Requirement:
    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """labels.Requirement.Matches for the set-based operators."""
        if self.operator == "In":
            return labels.get(self.key) in self.values
        if self.operator == "NotIn":
            value = labels.get(self.key)
            return value is None or value not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels  # DoesNotExist


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False  # the nil selector: matches nothing

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> LabelSelector:
        """A metav1.LabelSelector (None: NOTHING, {}: EVERYTHING). Raises SelectorError if malformed."""
        if raw is None:
            return NOTHING
        if not isinstance(raw, Mapping):
            raise SelectorError(f"a label selector must be a mapping, not {type(raw).__name__}")
        found: list[Requirement] = []
        for key, value in (raw.get("matchLabels") or {}).items():
            found.append(Requirement(str(key), "In", (str(value),)))
        for i, expr in enumerate(raw.get("matchExpressions") or []):
            if not isinstance(expr, Mapping):
                raise SelectorError(f"matchExpressions[{i}] must be a mapping")
            operator = expr.get("operator")
            if operator not in _OPERATORS:
                raise SelectorError(f"matchExpressions[{i}].operator {operator!r} is not one of {sorted(_OPERATORS)}")
            values = tuple(sorted({str(v) for v in expr.get("values") or []}))
            if operator in ("In", "NotIn") and not values:
                raise SelectorError(f"matchExpressions[{i}]: {operator} needs values")
            if operator in ("Exists", "DoesNotExist") and values:
                raise SelectorError(f"matchExpressions[{i}]: {operator} takes no values")
            found.append(Requirement(str(expr.get("key", "")), str(operator), values))
        return cls(tuple(sorted(set(found))))

    @classmethod
    def from_set(cls, labels: Mapping[str, str]) -> LabelSelector:
        """labels.SelectorFromSet: key=value for each pair ({} selects everything)."""
        return cls(tuple(sorted(Requirement(k, "In", (v,)) for k, v in labels.items())))

    @property
    def empty(self) -> bool:
        """labels.Selector.Empty(): no requirement (EVERYTHING). NOTHING is not empty."""
        return not self.nothing and not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.nothing:
            return False
        return all(r.matches(labels) for r in self.requirements)

    def adding(self, requirements: Iterable[Requirement]) -> LabelSelector:
        """This selector with more requirements ANDed in (NOTHING stays NOTHING, as Selector.Add)."""
        if self.nothing:
            return self
        return LabelSelector(tuple(sorted(set(self.requirements) | set(requirements))))

    def equalities(self) -> list[tuple[str, str]]:
        """The (key, value) pairs a matching object must carry: each `In` requirement with a single value.
        Indexes use them to test a pod only against the selectors that can match it."""
        return [(r.key, r.values[0]) for r in self.requirements if r.operator == "In" and len(r.values) == 1]


NOTHING = LabelSelector(nothing=True)
EVERYTHING = LabelSelector()
