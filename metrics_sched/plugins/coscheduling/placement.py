"""Where a whole gang goes: the topology domain that can hold every member still to place and scores best.

Chosen once per attempt of a gang, when its first member is scored: over the nodes that member's filters
passed, each domain's capacity is simulated (how many members each node still takes: the smallest, over the
resources a member requests, of free // request, the `pods` resource included) and the members are poured
onto the domain's best-scored nodes first; the domain's objective is the mean of the profile's weighted score
(the framework's totals, 0-100: cooler, cheaper, less loaded...) over the places they would take. The domain
with the best objective among those that hold them all wins; ties go to the larger spare capacity, then to
the name. Everything is one vector pass over the candidate nodes (no loop over nodes or domains).

Members are treated as the largest of them (the elementwise maximum of their requests): a conservative
capacity for gangs whose members differ, exact for the usual gang of one template.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metrics_sched.framework import FloatArray, IntArray, NodeTable

__all__ = ["DomainChoice", "DomainScore", "choose_domain", "member_capacity"]


@dataclass(frozen=True)
class DomainScore:
    value: str
    capacity: int  # members its feasible nodes can take
    objective: float  # mean weighted score of the places the members would take (NaN: cannot hold them all)


@dataclass(frozen=True)
class DomainChoice:
    topology_key: str
    needed: int
    chosen: DomainScore | None  # None: no domain holds them all
    domains: tuple[DomainScore, ...]  # every domain with a feasible node, best first

    def explain(self) -> str:
        shown = ", ".join(
            f"{d.value} (holds {d.capacity}, score {d.objective:.1f})" if d.capacity >= self.needed
            else f"{d.value} (holds {d.capacity} < {self.needed})" for d in self.domains[:6])
        more = f" and {len(self.domains) - 6} more" if len(self.domains) > 6 else ""
        if self.chosen is None:
            return (f"no {self.topology_key} domain can hold the {self.needed} members still to place: "
                    f"{shown or 'no feasible node has the label'}{more}")
        return (f"{self.topology_key}={self.chosen.value} holds all {self.needed} members still to place and "
                f"scores best: {shown}{more}")


def member_capacity(table: NodeTable, rows: IntArray, request: IntArray) -> IntArray:
    """How many members of `request` (a table-aligned resource vector) each row still takes."""
    wanted = np.flatnonzero(request > 0)
    if wanted.size == 0:
        return np.full(rows.shape[0], np.iinfo(np.int64).max // 4, dtype=np.int64)
    free = table.allocatable[np.ix_(rows, wanted)] - table.requested[np.ix_(rows, wanted)]
    per_resource = np.maximum(free, 0) // request[wanted]
    return np.asarray(per_resource.min(axis=1), dtype=np.int64)


def choose_domain(table: NodeTable, topology_key: str, rows: IntArray, total: FloatArray, request: IntArray,
                  needed: int) -> DomainChoice:
    """The best domain of `topology_key` for `needed` members of `request`, over the feasible `rows` scored
    `total` (aligned with rows)."""
    topology = table.topology(topology_key)
    codes = topology.codes[rows]
    labelled = codes >= 0
    rows, codes, scores = rows[labelled], codes[labelled], np.nan_to_num(total[labelled], nan=0.0)
    if rows.size == 0:
        return DomainChoice(topology_key, needed, None, ())
    capacity = np.minimum(member_capacity(table, rows, request), needed)
    # Within each domain, best-scored nodes first; each takes what is left of `needed` up to its capacity.
    order = np.lexsort((-scores, codes))
    codes, scores, capacity = codes[order], scores[order], capacity[order]
    cumulative = np.cumsum(capacity)
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    before_domain = np.repeat(np.r_[0, cumulative[starts[1:] - 1]], np.diff(np.r_[starts, codes.size]))
    placed_before = cumulative - capacity - before_domain
    taken = np.clip(needed - placed_before, 0, capacity)
    size = int(codes.max()) + 1
    held = np.bincount(codes, weights=capacity, minlength=size)
    weighted = np.bincount(codes, weights=taken * scores, minlength=size)
    count = np.bincount(codes, weights=taken, minlength=size)
    present = np.unique(codes)
    fits = held[present] >= needed
    objective = np.where(fits, weighted[present] / np.maximum(count[present], 1), np.nan)
    spare = held[present] - needed
    # Best first: fitting domains by objective, then spare capacity, then name; the rest by capacity.
    names = np.array([topology.values[c] for c in present], dtype=object)
    ranking = sorted(range(present.size), key=lambda i: (
        not bool(fits[i]), -(objective[i] if fits[i] else held[present[i]]), -spare[i], names[i]))
    domains = tuple(DomainScore(str(names[i]), int(held[present[i]]), float(objective[i])) for i in ranking)
    chosen = domains[0] if domains and domains[0].capacity >= needed else None
    return DomainChoice(topology_key, needed, chosen, domains)
