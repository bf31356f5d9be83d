"""A filter's verdict over the whole node table, and a dry run's: their own module, so the Handle (which runs the
filters for a plugin) and the extension-point interfaces (which return them) both stand on it without importing
each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from metrics_sched.framework.cycle_state import StateKey
from metrics_sched.state.node_table import BoolArray, NodeTable

__all__ = ["FEASIBLE_BEFORE", "DryRun", "Filtered"]

# The rows every earlier filter of the cycle let through, written by the framework before it asks each filter (absent
# outside a cycle's filter pass). Upstream runs a node's Filter plugins in order and stops at the first that rejects
# the node, so a later plugin's Filter never sees it: a filter whose verdict has effects beyond the node's
# feasibility (an error that ends the attempt, state its PostFilter acts on) must look at these rows only.
FEASIBLE_BEFORE = StateKey[BoolArray]("framework/feasible-before")


@dataclass
class Filtered:
    """A filter's verdict over every row of the table: feasible[row] and why the others failed.

    `reasons` maps a human reason (as in FailedScheduling messages) to the rows it rejects. Every reason
    a row is listed under is counted, as kube-scheduler counts each reason of a node's status (Insufficient
    cpu and Insufficient memory); a plugin whose upstream Filter stops at the first failing rule lists the
    row under that rule only.
    """

    feasible: BoolArray
    reasons: dict[str, BoolArray] = field(default_factory=dict)
    # An error that ends the scheduling attempt (upstream's Filter returning an Error status, e.g. a device
    # selector that fails to evaluate): the pod backs off and is retried, no PostFilter runs.
    error: str | None = None

    @classmethod
    def single(cls, feasible: BoolArray, reason: str) -> Filtered:
        return cls(feasible, {reason: ~feasible})

    @classmethod
    def all(cls, table: NodeTable) -> Filtered:
        return cls(np.ones(table.capacity, dtype=bool))


class DryRun(NamedTuple):
    """PreFilter and Filter over the state as it is now (preemption's what-if runs), with what the filters that had
    something to check (not skipped by their PreFilter) declare about the verdict."""

    verdict: Filtered
    resolvable: frozenset[str]  # the verdict's reasons that removing pods may resolve (FilterPlugin.resolvable)
    node_local: bool  # every filter in play judges a node by that node alone (FilterPlugin.node_local)
