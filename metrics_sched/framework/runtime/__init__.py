"""The engine that runs a profile's plugins (kube-scheduler's framework runtime): what the SDK's plugins never import.

    framework   Framework: builds a profile's plugins, picks its cycle runner, runs assume, Reserve, Permit and the
                binding cycle
    full_cycle  the full-cycle runner: PreFilter → Filter → [PostFilter] → PreScore → Score → the pick, every node
    batching    the batched-cycle runner (opportunistic batching), chosen from the profile; it calls the full cycle
    results     CycleResult and the other records of a cycle
    codes       the status codes each extension point may return
"""

from metrics_sched.framework.runtime.framework import Framework
from metrics_sched.framework.runtime.full_cycle import FullCycle, normalize_scores
from metrics_sched.framework.runtime.results import CycleResult, FilterStep, ScoreTerm, WhatIf, first_rejecter

__all__ = ["CycleResult", "FilterStep", "Framework", "FullCycle", "ScoreTerm", "WhatIf", "first_rejecter",
           "normalize_scores"]
