"""Decision audit: one DecisionRecord per scheduling attempt, fanned out to several sinks."""

from metrics_sched.audit.record import (
    Candidate,
    DecisionRecord,
    EvictionRecord,
    StoredDecision,
    TermDetail,
    build_record,
    new_eviction_record,
)
from metrics_sched.audit.ring import DecisionRing

__all__ = ["Candidate", "DecisionRecord", "DecisionRing", "EvictionRecord", "StoredDecision", "TermDetail",
           "build_record", "new_eviction_record"]
