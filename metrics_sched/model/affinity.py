"""A pod's inter-pod (anti-)affinity terms, parsed once, as kube-scheduler's framework.PodInfo holds them.

A term selects pods by namespace and labels (`AffinityTerm.matches`, upstream AffinityTerm.Matches):

- `namespaces` lists names; with neither `namespaces` nor a `namespaceSelector` the term means the
  pod's own namespace;
- `namespaceSelector` selects namespaces by their labels (absent: none; `{}`: every namespace);
- `matchLabelKeys` / `mismatchLabelKeys` add `key in (pod's value)` / `key notin (pod's value)` to the
  label selector for each key the pod carries. The API server already merges them into labelSelector when
  the pod is created; merging again here is idempotent (the same requirement is not added twice) and
  covers API servers that do not.

Terms are values (frozen, hashable): the replicas of one Deployment carry equal terms, which the cluster
state counts once per node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from metrics_sched.model.selectors import NOTHING, LabelSelector, Requirement, SelectorError

__all__ = ["AffinityTerm", "PodAffinityTerms", "TermKind", "WeightedTerm", "parse_affinity"]


@dataclass(frozen=True)
class AffinityTerm:
    namespaces: frozenset[str]
    namespace_selector: LabelSelector  # NOTHING when the term has none
    selector: LabelSelector
    topology_key: str

    def matches(self, namespace: str, labels: Mapping[str, str], namespace_labels: Mapping[str, str] | None) -> bool:
        """Whether a pod (its namespace, labels, and its namespace's labels) is one this term selects."""
        if namespace in self.namespaces or self.namespace_selector.matches(namespace_labels or {}):
            return self.selector.matches(labels)
        return False

    def resolved(self, namespace_names: frozenset[str]) -> AffinityTerm:
        """The term with its namespaceSelector replaced by the names it selects now (kube-scheduler's
        mergeAffinityTermNamespacesIfNotEmpty, for the incoming pod's own terms). `{}` stays: it selects
        every namespace, including ones created later."""
        if self.namespace_selector.empty or self.namespace_selector.nothing:
            return self
        return AffinityTerm(self.namespaces | namespace_names, NOTHING, self.selector, self.topology_key)

    @property
    def any_namespace(self) -> bool:
        return self.namespace_selector.empty


@dataclass(frozen=True)
class WeightedTerm:
    term: AffinityTerm
    weight: int


class TermKind(Enum):
    """The four kinds of term an existing pod carries, as the cluster state indexes them."""

    REQUIRED_AFFINITY = "requiredAffinity"
    REQUIRED_ANTI_AFFINITY = "requiredAntiAffinity"
    PREFERRED_AFFINITY = "preferredAffinity"
    PREFERRED_ANTI_AFFINITY = "preferredAntiAffinity"


@dataclass(frozen=True)
class PodAffinityTerms:
    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[WeightedTerm, ...] = ()
    preferred_anti_affinity: tuple[WeightedTerm, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.required_affinity or self.required_anti_affinity or self.preferred_affinity
                    or self.preferred_anti_affinity)

    def carried(self) -> list[tuple[TermKind, AffinityTerm, int]]:
        """(kind, term, weight) of every term, as the existing-pod index counts them (required: weight 1)."""
        out = [(TermKind.REQUIRED_AFFINITY, t, 1) for t in self.required_affinity]
        out += [(TermKind.REQUIRED_ANTI_AFFINITY, t, 1) for t in self.required_anti_affinity]
        out += [(TermKind.PREFERRED_AFFINITY, w.term, w.weight) for w in self.preferred_affinity]
        out += [(TermKind.PREFERRED_ANTI_AFFINITY, w.term, w.weight) for w in self.preferred_anti_affinity]
        return out


NO_TERMS = PodAffinityTerms()


def _label_keys(keys: Any, labels: Mapping[str, str], operator: str) -> list[Requirement]:
    return [Requirement(str(k), operator, (labels[k],)) for k in keys or () if k in labels]


def _term(raw: Mapping[str, Any], namespace: str, labels: Mapping[str, str]) -> AffinityTerm:
    selector = LabelSelector.parse(raw.get("labelSelector"))
    # A nil selector stays nil (it matches nothing). A key the selector already constrains was merged by the
    # API server at creation: merging the pod's current value again would differ if its labels changed since.
    constrained = {r.key for r in selector.requirements}
    merged = [r for r in _label_keys(raw.get("matchLabelKeys"), labels, "In")
              + _label_keys(raw.get("mismatchLabelKeys"), labels, "NotIn") if r.key not in constrained]
    if merged and not selector.nothing:
        selector = selector.adding(merged)
    names = [str(n) for n in raw.get("namespaces") or ()]
    raw_ns_selector = raw.get("namespaceSelector")
    if not names and raw_ns_selector is None:
        names = [namespace]
    return AffinityTerm(frozenset(names), LabelSelector.parse(raw_ns_selector), selector,
                        str(raw.get("topologyKey") or ""))


def _terms(section: Mapping[str, Any], namespace: str, labels: Mapping[str, str]) -> tuple[AffinityTerm, ...]:
    raw: Sequence[Any] = section.get("requiredDuringSchedulingIgnoredDuringExecution") or ()
    return tuple(_term(t, namespace, labels) for t in raw if isinstance(t, Mapping))


def _weighted(section: Mapping[str, Any], namespace: str, labels: Mapping[str, str]) -> tuple[WeightedTerm, ...]:
    raw: Sequence[Any] = section.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    return tuple(WeightedTerm(_term(w.get("podAffinityTerm") or {}, namespace, labels), int(w.get("weight") or 0))
                 for w in raw if isinstance(w, Mapping))


def parse_affinity(pod: Mapping[str, Any]) -> PodAffinityTerms:
    """The pod's inter-pod affinity terms. Raises SelectorError for a selector the API would reject."""
    spec = pod.get("spec") or {}
    affinity = spec.get("affinity") or {}
    if not isinstance(affinity, Mapping):
        return NO_TERMS
    pod_affinity = affinity.get("podAffinity") or {}
    anti = affinity.get("podAntiAffinity") or {}
    if not pod_affinity and not anti:
        return NO_TERMS
    metadata = pod.get("metadata") or {}
    namespace = str(metadata.get("namespace") or "")
    labels = metadata.get("labels") or {}
    try:
        return PodAffinityTerms(
            required_affinity=_terms(pod_affinity, namespace, labels),
            required_anti_affinity=_terms(anti, namespace, labels),
            preferred_affinity=_weighted(pod_affinity, namespace, labels),
            preferred_anti_affinity=_weighted(anti, namespace, labels),
        )
    except (TypeError, ValueError) as exc:
        raise SelectorError(str(exc)) from exc
